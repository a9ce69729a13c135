"""Extraction benchmark: what the extraction Job runs against oras + tar and the tar -xzf floor.

Builds a synthetic Triton-like cache (~200 MB in ~5,000 files, one gzip layer), pushes it to the local
registry, then measures every contender as a fresh process, in alternating order:
  ours         python -m ...extract.job_main, the extraction Job's own entry point (interpreter start,
               resolve, stream-extract with digest check and safety rules, marker, atomic swap)
  oras_tar     oras manifest fetch + oras blob fetch of the layer + tar -xzf of it
  tar_floor    tar -xzf of the same layer blob already on local disk
  skopeo_tar   skopeo copy to a dir: layout + tar -xzf of the layer (with --skopeo)
Page cache: the same for every contender. The registry serves the blob from its storage and tar_floor reads
its copy, both on the filesystem of the destinations, both warm after one untimed warm-up round of every
contender; nothing is dropped. Every run extracts into a new directory and nothing is deleted until all
timed runs are over: on ext4 without a journal, creating files right after others were deleted costs many
times more system time (the allocator skips inodes freed in the last minute), so a deletion would bill the next
run for the last one's tree. `sync` runs (untimed) before each run, so no contender pays for another's writeback.
Per contender: median, min and max of wall and CPU seconds (user + system of the process and all its
children, from RUSAGE_CHILDREN around each command), and the instruction count from `perf stat -e
instructions` where the machine has the counter (the JSON says why not otherwise).
Also: 10 extractions in one process (job_main.main called 10 times: the growth of the 10th over the 1st,
with user and system time apart, each followed by ours in a fresh process and tar -xzf as controls),
the no-op re-run (in-process and as a fresh process) and an ansible-playbook run of cache_extract.
Results are refused when the 1-minute load average is above --max-load before or after (unless
--allow-busy, which marks them busy): on a busy machine every contender's time is mostly waiting.
Writes bench/results/extract.json.
"""

import argparse
import importlib.util
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
sys.path[:0] = [COLLECTIONS, ROOT]

from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.extract import streams  # noqa: E402
from tests.helpers import kcache_images  # noqa: E402

TOOLS_BIN = os.path.expanduser("~/.cache/gkm-cluster/tools/bin")
JOB_MAIN = "ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main"
DEFAULT_MAX_LOAD = 1.5
GROWTH_RUNS = 10
# Ten extractions in one interpreter: what a long-lived caller (the module under a persistent runner,
# a test process) does. Each run starts like a timed contender's (a new directory, sync); prints the
# user, system and wall seconds of each.
GROWTH_SCRIPT = """
import contextlib, io, json, os, resource, sys, time
from %s import main
image, dest = sys.argv[1], sys.argv[2]
for run, _ in enumerate(sys.stdin):  # one extraction per line the parent writes
    os.sync()
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--image", image, "--dest", "%%s-%%d" %% (dest, run), "--plain-http"]) == 0
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps([after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime,
                      time.perf_counter() - wall]), flush=True)
""" % JOB_MAIN


def registry_host():
    spec = importlib.util.spec_from_file_location("gkm_sim", os.path.join(ROOT, "tools", "sim-cluster", "sim.py"))
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    state = sim.load_state()
    if not sim.is_running(state["processes"].get("registry")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sim-cluster", "sim.py"), "registry-up"],
                       check=True)
        state = sim.load_state()
    return state["registry"]


def perf_instructions_status():
    """None when `perf stat -e instructions` counts here, else why it cannot."""
    if not shutil.which("perf"):
        return "perf is not installed"
    probe = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"], capture_output=True, text=True,
                           check=False)
    line = (probe.stderr.strip().splitlines() or [""])[-1]
    if probe.returncode != 0 or not line.split(",")[0].isdigit():
        return ("perf stat -e instructions does not count here (%s): the virtual machine exposes no hardware "
                "performance counters" % (line or "exit %d" % probe.returncode))
    return None


class Runner:
    """Runs a contender's commands as child processes: wall, CPU (RUSAGE_CHILDREN) and instructions."""

    def __init__(self, env, count_instructions):
        self.env = env
        self.count_instructions = count_instructions

    def measure(self, commands):
        counts = []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        for command in commands:
            if self.count_instructions:
                with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
                    _run(["perf", "stat", "-x,", "-e", "instructions", "-o", out.name, "--", *command], self.env)
                    counts.append(_perf_count(out.read()))
            else:
                _run(command, self.env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime,
                "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                "instructions": sum(counts) if self.count_instructions else None}


def _perf_count(text):
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and "instructions" in fields[2] and fields[0].isdigit():
            return int(fields[0])
    raise RuntimeError("no instruction count in perf's output: %r" % text)


def _run(command, env=None):
    return subprocess.run(command, check=True, capture_output=True, text=True, env=env)


class NewDirectories:
    """A new directory per run under one root, none deleted before the root at the end (see the docstring)."""

    def __init__(self, root):
        self.root = root
        self.count = 0
        os.makedirs(root)

    def new(self, create=True):
        self.count += 1
        path = os.path.join(self.root, "run-%d" % self.count)
        if create:
            os.makedirs(path)
        subprocess.run(["sync"], check=False)
        return path


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_interleaved(runner, contenders, runs):
    """Samples per contender; each round runs every contender once, starting one further along each time."""
    names = list(contenders)
    samples = {name: [] for name in names}
    for round_index in range(runs + 1):  # round 0 warms the page cache and is not kept
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            sample = runner.measure(contenders[name]())
            if round_index:
                samples[name].append(sample)
        print("round %d/%d done, load %.2f" % (round_index, runs, os.getloadavg()[0]), flush=True)
    return samples


def contender_table(samples):
    table = {}
    for name, runs in samples.items():
        row = {key: summary([run[key] for run in runs]) for key in ("wall_s", "cpu_s", "user_s", "sys_s")}
        if runs[0]["instructions"] is not None:
            row["instructions"] = summary([run["instructions"] for run in runs])
        row["samples"] = runs
        table[name] = row
    return table


def growth_in_one_process(runner, env, image_ref, directories, controls):
    """10 extractions in one process, each followed by one run of every control, each in a fresh process.

    The series alternate, so all see the same machine. Growth that the controls show too (ours in a fresh
    process, and tar, which shares no code with us) comes from the machine (the file system filling with the
    earlier trees), not from state the process accumulates.
    """
    series = {"one_process": []}
    series.update((name, []) for name in controls)
    with subprocess.Popen([sys.executable, "-c", GROWTH_SCRIPT, image_ref, os.path.join(directories.new(), "c")],
                          env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as process:
        for _ in range(GROWTH_RUNS):
            process.stdin.write("extract\n")
            process.stdin.flush()
            user, system, wall = json.loads(process.stdout.readline())
            series["one_process"].append({"user_s": user, "sys_s": system, "cpu_s": user + system, "wall_s": wall})
            for name, command in controls.items():
                series[name].append(runner.measure(command()))
        process.stdin.close()
    if process.returncode:
        raise RuntimeError("the one-process extraction series failed (exit %d)" % process.returncode)

    def growth(samples):
        return {key: samples[-1][key] / samples[0][key] for key in ("user_s", "cpu_s", "wall_s")}

    def growth_of_medians(samples):  # one extraction varies by a quarter here: three against three is steadier
        return {key: statistics.median(run[key] for run in samples[-3:])
                / statistics.median(run[key] for run in samples[:3]) for key in ("user_s", "cpu_s", "wall_s")}

    return {"runs": GROWTH_RUNS, "series": series,
            "10th_over_1st": {name: growth(samples) for name, samples in series.items()},
            "last_3_over_first_3": {name: growth_of_medians(samples) for name, samples in series.items()}}


def noop_reruns(env, image_ref, dest, runs):
    """No-op re-runs over an intact extraction: the module's work in-process, and a fresh job_main process."""
    options = {"image": image_ref, "dest": dest, "plain_http": True}
    cache_pull.ensure_cache(options)
    in_process = []
    for _ in range(runs):
        start = time.perf_counter()
        assert cache_pull.ensure_cache(options)["changed"] is False
        in_process.append((time.perf_counter() - start) * 1000)
    process = []
    for _ in range(runs):
        start = time.perf_counter()
        result = json.loads(_run([sys.executable, "-m", JOB_MAIN, "--image", image_ref, "--dest", dest,
                                  "--plain-http"], env).stdout)
        assert result["changed"] is False
        process.append((time.perf_counter() - start) * 1000)
    return {"in_process_ms": summary(in_process), "job_main_process_ms": summary(process)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", help="host:port (default: the local simulated cluster's registry)")
    parser.add_argument("--bytes", type=int, default=200_000_000)
    parser.add_argument("--files", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--playbook-runs", type=int, default=3, help="0 skips the ansible-playbook timing")
    parser.add_argument("--skopeo", action="store_true", help="also measure skopeo copy + tar")
    parser.add_argument("--max-load", type=float, default=DEFAULT_MAX_LOAD,
                        help="refuse to write results above this 1-minute load average (default %(default)s)")
    parser.add_argument("--allow-busy", action="store_true", help="write results even on a busy machine, "
                        "marked busy")
    parser.add_argument("--workdir", help="where the layer and the destinations go (default: a new directory "
                        "in $TMPDIR); the registry's storage should be on the same filesystem")
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "results", "extract.json"))
    args = parser.parse_args()

    load_before = os.getloadavg()
    if load_before[0] > args.max_load and not args.allow_busy:
        sys.exit("load average %.2f is above %.2f: the figures would measure the other load. Wait for a quiet "
                 "machine or pass --allow-busy (results are then marked busy)" % (load_before[0], args.max_load))
    subprocess.run([os.path.join(ROOT, "tools", "bench-tools.sh")], check=False, capture_output=True)
    oras = os.path.join(TOOLS_BIN, "oras")
    registry = args.registry or registry_host()
    perf_problem = perf_instructions_status()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([COLLECTIONS] + [p for p in [os.environ.get("PYTHONPATH")]
                                                                       if p]))
    runner = Runner(env, perf_problem is None)
    work = tempfile.mkdtemp(prefix="gkm-bench-extract-", dir=args.workdir)
    try:
        print("building and pushing a %d MB / %d-file cache ..." % (args.bytes // 10**6, args.files), flush=True)
        image, blob_path, raw_bytes, file_count = kcache_images.build_large_image(
            registry, "bench/triton-large", "v1", work, args.bytes, args.files)
        blob_size = os.path.getsize(blob_path)
        directories = NewDirectories(os.path.join(work, "runs"))

        def ours(dest):
            return [[sys.executable, "-m", JOB_MAIN, "--image", image.ref, "--dest", dest, "--plain-http"]]

        contenders = {
            "ours": lambda: ours(directories.new(create=False)),
            "tar_floor": lambda: [["tar", "-xzf", blob_path, "-C", directories.new()]],
        }
        results = {"runs": args.runs, "entry_point": "python -m %s (the extraction Job's command)" % JOB_MAIN}
        if os.access(oras, os.X_OK):
            def oras_tar(directory):
                layer_file = os.path.join(directory, "layer.tgz")
                os.makedirs(os.path.join(directory, "out"))
                return [[oras, "manifest", "fetch", "--plain-http", image.ref],
                        [oras, "blob", "fetch", "--plain-http", "--output", layer_file,
                         "%s/%s@%s" % (registry, image.repository, image.layer_digest)],
                        ["tar", "-xzf", layer_file, "-C", os.path.join(directory, "out")]]

            contenders["oras_tar"] = lambda: oras_tar(directories.new())
            results["oras_version"] = _run([oras, "version"]).stdout.splitlines()[0]
        else:
            results["oras_missing"] = "%s not built (tools/bench-tools.sh)" % oras
        if args.skopeo and shutil.which("skopeo"):
            def skopeo_tar(directory):
                os.makedirs(os.path.join(directory, "out"))
                return [["skopeo", "copy", "--insecure-policy", "--quiet", "--src-tls-verify=false",
                         "docker://" + image.ref, "dir:" + os.path.join(directory, "image")],
                        ["tar", "-xzf", os.path.join(directory, "image", image.layer_digest.split(":", 1)[1]),
                         "-C", os.path.join(directory, "out")]]

            contenders["skopeo_tar"] = lambda: skopeo_tar(directories.new())
        print("measuring %s, %d rounds after a warm-up round ..." % (", ".join(contenders), args.runs), flush=True)
        table = contender_table(measure_interleaved(runner, contenders, args.runs))
        results["contenders"] = table
        results["instructions"] = "counted" if perf_problem is None else perf_problem
        results["growth_in_one_process"] = growth = growth_in_one_process(
            runner, env, image.ref, directories,
            {"ours_fresh_process": contenders["ours"], "tar_floor": contenders["tar_floor"]})
        results["noop_rerun"] = noop_reruns(env, image.ref, os.path.join(work, "noop", "cache"), max(10, args.runs))
        if args.playbook_runs:
            results["playbook"] = playbook_timing(image, directories, args.playbook_runs)

        def ratio(name, key):
            return table["ours"][key]["median"] / table[name][key]["median"] if name in table else None

        results["ratios"] = {
            "ours_over_oras_tar_wall": ratio("oras_tar", "wall_s"),
            "ours_over_tar_floor_wall": ratio("tar_floor", "wall_s"),
            "ours_over_oras_tar_cpu": ratio("oras_tar", "cpu_s"),
            "ours_over_tar_floor_cpu": ratio("tar_floor", "cpu_s"),
            "ours_over_skopeo_tar_wall": ratio("skopeo_tar", "wall_s"),
            "growth_10th_over_1st_cpu": growth["10th_over_1st"]["one_process"]["cpu_s"],
            "growth_last_3_over_first_3_cpu": {name: values["cpu_s"]
                                               for name, values in growth["last_3_over_first_3"].items()},
        }
        results["sizes"] = {"uncompressed_bytes": raw_bytes, "files": file_count, "layer_bytes": blob_size,
                            "compression_ratio": round(raw_bytes / blob_size, 2)}
        load_after = os.getloadavg()
        busy = max(load_before[0], load_after[0]) > args.max_load
        results["environment"] = {
            "cpus": os.cpu_count(), "python": platform.python_version(), "isal": streams.HAS_ISAL,
            "load_average_before": load_before, "load_average_after": load_after, "max_load": args.max_load,
            "busy": busy, "registry": "docker-registry (distribution 2.8) on loopback",
            "page_cache": "warm for all: one untimed warm-up round; blob served from the registry's storage or "
                          "read from disk on the destinations' filesystem; every run into a new directory, none "
                          "deleted before the end; sync (untimed) before each run"}
        if busy and not args.allow_busy:
            sys.exit("load average rose to %.2f (above %.2f) during the run: results not written"
                     % (load_after[0], args.max_load))
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(_rounded(results), f, indent=2, sort_keys=True)
            f.write("\n")
        print(json.dumps(_rounded({key: value for key, value in results.items() if key != "contenders"}),
                         indent=2, sort_keys=True))
        for name, row in table.items():
            print("%-11s wall %.3f s [%.3f-%.3f]  cpu %.3f s" % (name, row["wall_s"]["median"], row["wall_s"]["min"],
                                                               row["wall_s"]["max"], row["cpu_s"]["median"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def playbook_timing(image, directories, runs):
    """Median wall time of ansible-playbook running one cache_extract task, and of the task itself."""
    playbook = os.path.join(directories.new(), "extract.yml")
    with open(playbook, "w") as f:
        f.write("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                "    - gkm.cluster.cache_extract:\n        image: %s\n        dest: \"{{ dest }}\"\n"
                "        registry_plain_http: true\n" % image.ref)
    site_packages = os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([COLLECTIONS, site_packages]))
    binary = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    walls, tasks = [], []
    for _ in range(runs):
        dest = os.path.join(directories.new(), "cache")
        start = time.perf_counter()
        out = _run([binary, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                    "-e", "dest=" + dest, playbook], env).stdout
        walls.append(time.perf_counter() - start)
        task = json.loads(out)["plays"][0]["tasks"][0]
        assert task["hosts"]["localhost"]["changed"] is True
        started, ended = (task["task"]["duration"][k] for k in ("start", "end"))
        tasks.append(_iso_seconds(ended) - _iso_seconds(started))
    return {"wall_s": summary(walls), "task_s": summary(tasks)}


def _iso_seconds(stamp):
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    main()
