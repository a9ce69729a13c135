// Command loadgen sends AdmissionReview requests over HTTPS keep-alive connections and reports
// latency percentiles as JSON. It is the load generator of bench/webhook.py.
//
// With -rate R it is open-loop: requests are due every 1/R seconds and latency is measured from
// the moment a request was due, so a server that falls behind is charged for the queueing it
// causes (no coordinated omission). With -rate 0 every connection sends back to back, which
// measures the maximum throughput.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

type result struct {
	Rate        float64        `json:"target_rps"`
	Connections int            `json:"connections"`
	Seconds     float64        `json:"seconds"`
	Sent        int            `json:"sent"`
	OK          int            `json:"ok"`
	Failed      int            `json:"failed"`
	Statuses    map[string]int `json:"statuses"`
	AchievedRPS float64        `json:"achieved_rps"`
	P50Ms       float64        `json:"p50_ms"`
	P90Ms       float64        `json:"p90_ms"`
	P99Ms       float64        `json:"p99_ms"`
	MaxMs       float64        `json:"max_ms"`
}

func main() {
	url := flag.String("url", "", "https URL to POST to")
	caFile := flag.String("cacert", "", "PEM CA bundle that signed the server certificate")
	bodyFile := flag.String("body", "", "file holding the request body")
	rate := flag.Float64("rate", 0, "requests per second (0: as fast as the connections allow)")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	warmup := flag.Duration("warmup", 2*time.Second, "sending time before measuring starts")
	connections := flag.Int("connections", 8, "keep-alive connections")
	flag.Parse()

	body, err := os.ReadFile(*bodyFile)
	check(err)
	pem, err := os.ReadFile(*caFile)
	check(err)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		check(fmt.Errorf("no certificate in %s", *caFile))
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: *connections,
		MaxConnsPerHost:     *connections,
		ForceAttemptHTTP2:   false,
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	send := func() (int, error) {
		request, err := http.NewRequest(http.MethodPost, *url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		request.Header.Set("Content-Type", "application/json")
		response, err := client.Do(request)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, response.Body)
		response.Body.Close()
		return response.StatusCode, err
	}

	if *warmup > 0 {
		run(send, *rate, *connections, *warmup)
	}
	latencies, statuses, elapsed := run(send, *rate, *connections, *duration)
	out := summarize(latencies, statuses, elapsed)
	out.Rate = *rate
	out.Connections = *connections
	check(json.NewEncoder(os.Stdout).Encode(out))
}

type sample struct {
	latency time.Duration
	status  string
}

// run sends for the given time and returns every latency, the status counts and the wall time.
func run(send func() (int, error), rate float64, connections int, duration time.Duration) ([]time.Duration, map[string]int, time.Duration) {
	due := make(chan time.Time, 1<<20)
	samples := make(chan sample, 1<<16)
	var workers sync.WaitGroup
	start := time.Now()
	deadline := start.Add(duration)
	for i := 0; i < connections; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				var scheduled time.Time
				if rate > 0 {
					var open bool
					if scheduled, open = <-due; !open {
						return
					}
				} else {
					scheduled = time.Now()
					if scheduled.After(deadline) {
						return
					}
				}
				status, err := send()
				label := fmt.Sprint(status)
				if err != nil {
					label = "error"
					reportError(err)
				}
				samples <- sample{time.Since(scheduled), label}
			}
		}()
	}
	if rate > 0 {
		go func() {
			interval := time.Duration(float64(time.Second) / rate)
			for next := start; next.Before(deadline); next = next.Add(interval) {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				due <- next
			}
			close(due)
		}()
	}
	go func() { workers.Wait(); close(samples) }()
	var latencies []time.Duration
	statuses := map[string]int{}
	for s := range samples {
		latencies = append(latencies, s.latency)
		statuses[s.status]++
	}
	return latencies, statuses, time.Since(start)
}

func summarize(latencies []time.Duration, statuses map[string]int, elapsed time.Duration) result {
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	ms := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		index := int(q * float64(len(latencies)-1))
		return float64(latencies[index].Microseconds()) / 1000
	}
	ok := statuses["200"]
	return result{
		Seconds:     elapsed.Seconds(),
		Sent:        len(latencies),
		OK:          ok,
		Failed:      len(latencies) - ok,
		Statuses:    statuses,
		AchievedRPS: float64(ok) / elapsed.Seconds(),
		P50Ms:       ms(0.50),
		P90Ms:       ms(0.90),
		P99Ms:       ms(0.99),
		MaxMs:       ms(1.0),
	}
}

var reported sync.Map

// reportError prints each distinct error once to stderr, so failures are explained, not just counted.
func reportError(err error) {
	if _, seen := reported.LoadOrStore(err.Error(), true); !seen {
		fmt.Fprintln(os.Stderr, "loadgen: request failed:", err)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
