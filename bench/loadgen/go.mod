module gkm.io/bench/loadgen

go 1.24
