#!/usr/bin/env python3
"""Listeners: the socket file, TCP on port 0 and IPv6, accept under fd shortage, retention."""
import os
import re
import resource
import socket
import stat
import subprocess

import json

from tpdtest import TPD, Client, Daemon, Skip, check, eventually, read_to_eof, run_tests


def test_socket_file_mode_and_directory_created():
    with Daemon(sock_name="sub/dir/tpd.sock") as d:
        st = os.stat(d.sock)
        check(stat.S_ISSOCK(st.st_mode), "a socket")
        check(stat.S_IMODE(st.st_mode) == 0o660, "mode 0660 by default: %o", stat.S_IMODE(st.st_mode))
    with Daemon("--socket-mode", "0600") as d:
        check(stat.S_IMODE(os.stat(d.sock).st_mode) == 0o600, "configured mode")


def test_live_socket_is_an_error_naming_the_path():
    with Daemon() as d:
        r = subprocess.run([TPD, "-f", "-c", "none", "-s", d.sock], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        check(r.returncode != 0, "a second daemon on the same socket must not start")
        check(d.sock in r.stderr and "in use" in r.stderr, "%r", r.stderr)
        check(d.client().request({"op": "ping"})["event"] == "pong", "the first still serves")


def test_stale_socket_of_a_dead_daemon_is_replaced():
    with Daemon(start=False) as d:
        s = socket.socket(socket.AF_UNIX)
        s.bind(d.sock)      # a socket file nobody listens on
        s.close()
        d.start()
        check(d.client().request({"op": "ping"})["event"] == "pong", "serving on the old path")
        check("removing stale socket" in d.read_log(), "logged")


def test_ready_names_every_listener_with_its_bound_port():
    """READY=1 comes once every listener accepts, and its X_TPD_LISTEN lines name them."""
    with Daemon(tcp=True) as d:
        check(len(d.listeners) == 2 and d.listeners[0] == "unix " + d.sock and
              re.match(r"tcp 127\.0\.0\.1:[1-9][0-9]*$", d.listeners[1]),
              "the listeners: %r", d.listeners)
        port = int(d.listeners[1].rsplit(":", 1)[1])
        check("listening on tcp 127.0.0.1:%d" % port in d.read_log(), "the log agrees")
        # no retry: READY=1 says both accept now
        for address in (d.sock, ("127.0.0.1", port)):
            s = socket.socket(socket.AF_UNIX if isinstance(address, str) else socket.AF_INET)
            s.settimeout(10)
            s.connect(address)
            s.sendall(b'{"op":"ping","id":1}\n')
            check(s.recv(100) == b'{"event":"pong","id":1}\n', "ping on %r", address)
            s.close()


def test_tcp_port_zero_and_ipv6():
    with Daemon(tcp=True) as d:
        check(d.port and d.port > 0, "bound port told by READY=1: %r", d.port)
        check(d.client(tcp=True).request({"op": "ping"})["event"] == "pong", "tcp ping")
    if not socket.has_ipv6:
        raise Skip("no IPv6 on this machine")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError as e:
        raise Skip("cannot bind [::1]: %s" % e)
    with Daemon("-l", "[::1]:0", "--tcp-auth", "none") as d:
        m = re.match(r"tcp \[::1\]:(\d+)$", d.listeners[-1])
        check(m, "IPv6 listener named by READY=1: %r", d.listeners)
        s = socket.create_connection(("::1", int(m.group(1))), timeout=10)
        s.sendall(b'{"op":"ping","id":6}\n')
        check(s.recv(100) == b'{"event":"pong","id":6}\n', "IPv6 ping")
        s.close()


def test_bad_listen_address_is_a_clear_error():
    with Daemon(start=False) as d:
        r = subprocess.run([TPD, "-f", "-c", "none", "-s", d.sock, "-l", "localhost"], capture_output=True,
                           text=True, timeout=30, stdin=subprocess.DEVNULL)
        check(r.returncode != 0 and "HOST:PORT" in r.stderr, "%r", r.stderr)
        r = subprocess.run([TPD, "-f", "-c", "none", "-s", d.sock, "-l", "127.0.0.1:99999"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        check(r.returncode != 0 and "127.0.0.1:99999" in r.stderr, "%r", r.stderr)
        check(not os.path.exists(d.sock), "the Unix socket's file is left behind")


def test_accept_pauses_when_out_of_descriptors_and_recovers():
    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (24, 24))
    with Daemon(start=False) as d:
        d.log = open(d.log_path, "wb")
        d.proc = subprocess.Popen([TPD] + d.args, stdout=d.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, preexec_fn=low_fd_limit)
        eventually(lambda: os.path.exists(d.sock), "the socket exists")
        eventually(lambda: "ready" in d.read_log(), "tpd is ready")
        clients = []
        for _ in range(30):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.sock)          # the kernel's backlog accepts these
            clients.append(s)
        eventually(lambda: "pausing" in d.read_log(), "accept failure logged and paused")
        for s in clients:
            s.close()
        c = Client(d.sock)
        check(c.request({"op": "ping"})["event"] == "pong", "serves again once fds are free")
        c.close()


def test_client_past_max_connections_gets_too_many_connections():
    with Daemon("--max-connections", "2", tcp=True) as d:
        a = d.client()
        eventually(lambda: a.request({"op": "stats"})["connections"] == 1,
                   "the start-up probe connection is gone")
        b = d.client(tcp=True)
        check(b.request({"op": "ping"})["event"] == "pong", "the second client is served")
        for address in (d.sock, ("127.0.0.1", d.port)):
            s = socket.socket(socket.AF_UNIX if isinstance(address, str) else socket.AF_INET)
            s.connect(address)
            data = read_to_eof(s)
            s.close()
            lines = data.decode().splitlines()
            check(len(lines) == 1, "one line, then close: %r", data)
            ev = json.loads(lines[0])
            check(ev["event"] == "error" and ev["id"] is None, "%r", ev)
            check(ev["error"]["code"] == "too_many_connections", "%r", ev)
            msg = ev["error"]["message"]
            check("max_connections" in msg and " 2 " in msg, "names the limit: %r", msg)
        check(d.read_log().count("max_connections (2) reached") == 2, "logged")
        b.close()
        eventually(lambda: a.request({"op": "stats"})["connections"] == 1, "b is gone")
        check(d.client().request({"op": "ping"})["event"] == "pong", "room again")


def test_finished_tasks_are_retained_by_count():
    with Daemon("--result-retain", "2") as d:
        c = d.client()
        ids = []
        for i in range(3):
            rid, acc = c.submit({"kind": "echo", "value": i})
            c.done(rid)
            ids.append(acc["task"])
        ev = c.request({"op": "wait", "task": ids[0]})
        check(ev["event"] == "error" and ev["error"]["code"] == "no_such_task", "%r", ev)
        for t in ids[1:]:
            check(c.request({"op": "wait", "task": t})["event"] == "done", "retained %d" % t)


def test_finished_tasks_are_retained_by_time():
    with Daemon("--result-ttl", "50ms") as d:
        c = d.client()
        rid, acc = c.submit({"kind": "echo", "value": 1})
        c.done(rid)
        eventually(lambda: c.request({"op": "status", "task": acc["task"]})["event"] == "error",
                   "forgotten after result_ttl")


run_tests(globals())
