"""The Spark connector on a standalone cluster on this machine: super stream scaling and exactly once.

    python -m bench.spark_cluster --amqp-url amqp://guest:guest@127.0.0.1:5643/ \\
        --api http://127.0.0.1:15643/api --rows 200000 --executors 1,2,3

What it does, as a new user would (``spark-submit``, ``--py-files`` with the package zipped):
1. starts a bridge, a standalone master and ``--workers`` one-core workers (1 GiB each);
2. declares a super stream of ``--partitions`` partitions and writes ``--rows`` rows by key
   (``partitionKey``) with ``--write-tasks`` tasks: rows/s, and how many rows each partition got;
3. reads the whole super stream (a batch ``count()``) with 1, 2, 3 executors of one core: rows/s;
4. exactly once: the streaming job of ``examples/spark/super_stream.py`` (``--available-now``,
   ``--max-per-trigger``) copies the super stream to Parquet with a checkpoint; after two
   committed micro-batches its driver is killed with ``kill -9`` and the job submitted again;
   after two more, a worker (with its executor) is killed with ``kill -9``; the job runs to its
   end; the Parquet output must hold every (partition, offset) once.
Rows/s are timed in the driver around the Spark action (bench/spark_cluster_job.py). Run by
hand; the figures go in docs/spark.md with the date and the machine, never into tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

from bench.procstat import start_bridge
from testkit.management import Management

ROOT = Path(__file__).resolve().parents[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class Cluster:
    """A standalone master and one-core workers, each its own process group (kill -9 takes the
    worker and the executors it launched, as losing the machine would)."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.url = f"spark://127.0.0.1:{port}"
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                    "SPARK_HOME": str(spark_home())}
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, workers: int) -> None:
        self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(self.port), "--webui-port", str(self.port + 1000))
        wait_for(lambda: "I have been elected leader" in (self.workdir / "master.log").read_text(errors="replace"),
                 60, "the master to start")
        for _ in range(workers):
            self.add_worker()

    def add_worker(self) -> None:
        n = len(self.workers)
        work = self.workdir / f"worker-{n}"
        work.mkdir(exist_ok=True)
        self.workers.append(self._spawn(
            f"worker-{n}", "org.apache.spark.deploy.worker.Worker", "--cores", "1", "--memory", "1g",
            "--work-dir", str(work), "--webui-port", str(self.port + 1001 + n), self.url))
        log = self.workdir / f"worker-{n}.log"
        wait_for(lambda: "Successfully registered with master" in log.read_text(errors="replace"), 60,
                 f"worker {n} to register")

    def kill_worker(self, n: int) -> None:
        os.killpg(self.workers[n].pid, signal.SIGKILL)
        self.workers[n].wait()

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def wait_for(check, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def submit(cluster: Cluster, args: argparse.Namespace, zipped: Path, cores: int, script: str, *job: str,
           log: Path) -> subprocess.Popen:
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url,
               "--total-executor-cores", str(cores), "--executor-cores", "1", "--executor-memory", "768m",
               "--driver-memory", "768m", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2",
               "--py-files", f"{zipped},{ROOT / 'examples' / 'spark' / 'common.py'}", script, *job]
    out = open(log, "ab")
    return subprocess.Popen(command, env=cluster.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def result(proc: subprocess.Popen, log: Path, timeout: float) -> dict:
    code = proc.wait(timeout)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("RESULT ")]
    if code != 0 or not lines:
        raise RuntimeError(f"spark-submit exited with {code}; see {log}")
    return json.loads(lines[-1][len("RESULT "):])


def commits(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


def exactly_once(cluster: Cluster, args: argparse.Namespace, zipped: Path, super_stream: str, work: Path) -> dict:
    out, checkpoint = work / "eo-out", work / "eo-checkpoint"
    job = [str(ROOT / "examples" / "spark" / "super_stream.py"), "read", "--host", "127.0.0.1",
           "--port", str(args.bridge_port), "--super-stream", super_stream, "--output", str(out),
           "--checkpoint", str(checkpoint), "--available-now", "--max-per-trigger", str(args.per_trigger),
           "--protocol", args.protocol, "--stream-port", str(args.stream_port)]
    log = work / "eo-driver.log"
    events = []
    driver = submit(cluster, args, zipped, 2, *job, log=log)
    wait_for(lambda: commits(checkpoint) >= 2, 600, "two committed micro-batches")
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    events.append(f"driver killed with kill -9 after {commits(checkpoint)} committed micro-batches")
    driver = submit(cluster, args, zipped, 2, *job, log=log)
    before = commits(checkpoint)
    wait_for(lambda: commits(checkpoint) >= before + 2, 600, "two more micro-batches")
    apps = sorted(cluster.workdir.glob("worker-*/app-*"), key=lambda p: p.stat().st_mtime)
    running = apps[-1].name  # the restarted job's application: kill a worker one of its executors runs on
    victim = next(i for i, w in enumerate(cluster.workers)
                  if w.poll() is None and (cluster.workdir / f"worker-{i}" / running).exists())
    cluster.kill_worker(victim)
    events.append(f"worker {victim} and its executor killed with kill -9 after {commits(checkpoint)} micro-batches")
    code = driver.wait(1800)
    if code != 0:
        raise RuntimeError(f"the restarted streaming job exited with {code}; see {log}")
    events.append(f"job finished after {commits(checkpoint)} micro-batches")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").appName("eo-check").config("spark.ui.enabled", "false").getOrCreate()
    rows = spark.read.parquet(str(out))
    total = rows.count()
    distinct = rows.select("destination", "stream_offset").distinct().count()
    spark.stop()
    return {"events": events, "rows": total, "distinct": distinct, "expected": args.rows}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_cluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5643/")
    ap.add_argument("--api", default="http://127.0.0.1:15643/api")
    ap.add_argument("--bridge-port", type=int, default=61637)
    ap.add_argument("--master-port", type=int, default=7177)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--write-tasks", type=int, default=2)
    ap.add_argument("--executors", default="1,2,3", help="executor counts to read with")
    ap.add_argument("--per-trigger", type=int, default=20_000, help="maxMessagesPerTrigger of the exactly-once run")
    ap.add_argument("--skip-exactly-once", action="store_true")
    ap.add_argument("--protocol", default="auto", choices=("auto", "stream", "stomp"),
                    help="the connector's path: auto (streams over the stream protocol), stream or stomp")
    ap.add_argument("--stream-port", type=int, default=5543, help="RabbitMQ's stream port (4.3's by default)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
    zipped = work / "stomp_bridge.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for path in (ROOT / "stomp_bridge").rglob("*.py"):
            z.write(path, path.relative_to(ROOT))
    rabbit = Management(args.api)
    super_stream = f"bench-super-{uuid.uuid4().hex[:8]}"
    rabbit.request("PUT", f"/exchanges/%2F/{super_stream}",
                   {"type": "direct", "durable": True, "auto_delete": False, "arguments": {"x-super-stream": True}})
    for i in range(args.partitions):
        rabbit.declare_queue(f"{super_stream}-{i}", arguments={"x-queue-type": "stream"})
        rabbit.request("POST", f"/bindings/%2F/e/{super_stream}/q/{super_stream}-{i}",
                       {"routing_key": str(i), "arguments": {"x-stream-partition-order": i}})
    bridge = start_bridge(args.bridge_port, {"amqp_url": args.amqp_url})
    os.environ["STOMP_SPARK_OPTIONS"] = json.dumps({"protocol": args.protocol, "streamPort": str(args.stream_port)})
    cluster = Cluster(work, args.master_port)
    report: dict = {"rows": args.rows, "partitions": args.partitions, "workers": args.workers}
    job = str(ROOT / "bench" / "spark_cluster_job.py")
    try:
        cluster.start(args.workers)
        log = work / "write.log"
        report["write"] = result(submit(cluster, args, zipped, args.write_tasks, job, "write", "127.0.0.1",
                                        str(args.bridge_port), super_stream, str(args.rows), str(args.write_tasks),
                                        log=log), log, 1800)
        print("write", report["write"], flush=True)
        report["reads"] = []
        for n in (int(x) for x in args.executors.split(",") if x.strip()):
            log = work / f"read-{n}.log"
            got = result(submit(cluster, args, zipped, n, job, "read", "127.0.0.1", str(args.bridge_port),
                                super_stream, log=log), log, 1800)
            got["requested_executors"] = n
            report["reads"].append(got)
            print("read", got, flush=True)
        if not args.skip_exactly_once:
            report["exactly_once"] = exactly_once(cluster, args, zipped, super_stream, work)
            print("exactly once", report["exactly_once"], flush=True)
    finally:
        cluster.stop()
        bridge.terminate()
        bridge.wait(30)
        for i in range(args.partitions):
            rabbit.delete_queue(f"{super_stream}-{i}")
        rabbit.delete_exchange(super_stream)
    w = report["write"]
    print(f"\n{args.rows} rows, super stream of {args.partitions} partitions, {args.workers} one-core workers")
    print(f"write by key ({args.write_tasks} tasks): {w['rows'] / w['seconds']:,.0f} rows/s; landed {w['landed']}")
    for r in report["reads"]:
        print(f"read with {r['requested_executors']} executor(s), {r['tasks']} tasks: {r['rows'] / r['seconds']:,.0f} rows/s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True) if "exactly_once" in report else None
    return 0


if __name__ == "__main__":
    sys.exit(main())
