"""An etcd cluster on loopback for the benches (bench/failover, bench/scale): Debian's
etcd-server, three members by default, data in a directory of the caller's; the v2 API on
(torchrun's etcd-v2 backend uses it). requests() counts the calls etcd has taken (its
gRPC server's, which its JSON gateway goes through) from every member's /metrics."""
import os
import re
import socket
import subprocess
import time
import urllib.request

ETCD, ETCDCTL = "/usr/bin/etcd", "/usr/bin/etcdctl"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """Members on loopback ports, started at once; healthy when the constructor returns
    (else SystemExit); stop() ends them."""

    def __init__(self, work, members=3, timeout=60):
        self.procs, ports = [], [(free_port(), free_port()) for _ in range(members)]
        cluster = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.clients = [f"127.0.0.1:{c}" for c, _ in ports]
        self.endpoints = ",".join(self.clients)
        for i, (client, peer) in enumerate(ports):
            with open(os.path.join(work, f"etcd{i}.log"), "w") as log:
                self.procs.append(subprocess.Popen(
                    [ETCD, "--name", f"m{i}", "--data-dir", os.path.join(work, f"m{i}"),
                     "--listen-client-urls", f"http://127.0.0.1:{client}",
                     "--advertise-client-urls", f"http://127.0.0.1:{client}",
                     "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-cluster", cluster, "--initial-cluster-state", "new",
                     "--enable-v2=true"], stdout=log, stderr=log))
        env = dict(os.environ, ETCDCTL_API="3")
        deadline = time.time() + timeout
        while subprocess.run([ETCDCTL, f"--endpoints={self.endpoints}", "endpoint", "health"],
                             env=env, capture_output=True).returncode != 0:
            if time.time() > deadline:
                self.stop()
                raise SystemExit(f"etcd on {self.endpoints} not healthy within {timeout} s")
            time.sleep(0.2)

    def requests(self):
        """Every call the members have taken so far (grpc_server_started_total, summed)."""
        total = 0
        for client in self.clients:
            with urllib.request.urlopen(f"http://{client}/metrics", timeout=10) as reply:
                text = reply.read().decode()
            total += sum(float(v) for v in
                         re.findall(r"^grpc_server_started_total\{[^}]*\} (\S+)$", text, re.M))
        return total

    def elected(self, run_id):
        """The pid of the launcher elected to serve job `run_id`'s store (the one listening
        on the port its coordinator key names), or None."""
        env = dict(os.environ, ETCDCTL_API="3")
        got = subprocess.run([ETCDCTL, f"--endpoints={self.endpoints}", "get",
                              f"ddp-launch/{run_id}/coord", "--print-value-only"],
                             env=env, capture_output=True, text=True)
        where = got.stdout.split()
        if got.returncode != 0 or not where or ":" not in where[0]:
            return None
        port = where[0].rsplit(":", 1)[1]
        listening = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                                   text=True).stdout
        found = re.search(r"pid=(\d+)", listening)
        return int(found.group(1)) if found else None

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
