"""The guards of the HTTP server under the receiver and the console (found by a security
review: a thousand idle sockets, or one header byte every ten seconds, took both listeners of
the receiver down; a DNS-rebinding page could read the console and write into the receiver)."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest
import requests

from agent_replay.httpserver import GuardedHandler, GuardedHTTPServer
from slow_client import trickle


class Hello(GuardedHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(1.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def do_POST(self) -> None:
        length, body = int(self.headers["Content-Length"]), b""
        while len(body) < length:
            piece = self.read_paced(min(8, length - len(body)), len(body))
            if not piece:
                self.close_connection = True
                return
            body += piece
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server():
    started = []

    def start(host="127.0.0.1", **limits):
        served = GuardedHTTPServer((host, 0), Hello)
        for name, value in limits.items():
            setattr(served, name, value)
        threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05}).start()
        started.append(served)
        return served

    yield start
    for served in started:
        served.shutdown()
        served.server_close()


def get(served, host=None):
    headers = {} if host is None else {"Host": host}
    return requests.get(f"http://127.0.0.1:{served.server_address[1]}/", headers=headers, timeout=5)


def test_past_the_cap_an_idle_connection_makes_room_and_busy_ones_refuse(server):
    served = server(max_connections=3)
    port = served.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    for connection in idle:
        connection.settimeout(5)
    deadline = time.monotonic() + 5
    while (served._open < 3 or len(served._waiting) < 3) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert get(served).text == "ok"  # served: the connection idle longest was shut for it
    # (which one that is depends on the order their threads began to wait: one of them)
    readable, _, _ = select.select(idle, [], [], 5)
    assert len(readable) == 1 and readable[0].recv(1) == b""
    for connection in idle:
        connection.close()
    busy = [
        threading.Thread(target=lambda: requests.get(f"http://127.0.0.1:{port}/slow", timeout=10))
        for _ in range(3)
    ]
    for thread in busy:
        thread.start()
    deadline = time.monotonic() + 5
    while (served._open < 3 or served._waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(5)
    assert extra.recv(1) == b""  # every connection busy: closed at once
    for thread in busy:
        thread.join()
    assert get(served).text == "ok"


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(server):
    served = server(head_seconds=0.5)
    # each byte well within the 30 s read timeout
    took = trickle(
        served.server_address[1], b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    )
    assert took is not None and took < 15
    assert get(served).text == "ok"  # a prompt client is served


def test_on_loopback_a_request_naming_another_host_is_refused(server):
    served = server()
    port = served.server_address[1]
    assert get(served, "attacker.example").status_code == 421
    assert get(served, f"attacker.example:{port}").status_code == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "[::1]:80", "127.0.0.2"):
        assert get(served, host).text == "ok", host
    anywhere = GuardedHTTPServer(("0.0.0.0", 0), Hello)
    try:  # opened to the network on purpose: any name it is reached by
        assert anywhere.host_allowed("agents.example.com:4318") and not anywhere.loopback
    finally:
        anywhere.server_close()


def test_a_body_sent_a_byte_at_a_time_is_cut_off_once_it_falls_behind_the_pace(server):
    """A body trickled within the read timeout held its thread and connection (and, in the
    receiver, its part of the memory budget) as long as the client liked."""
    served = server(head_seconds=0.5, min_body_rate=64)
    head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 400\r\n\r\n"
    took = trickle(
        served.server_address[1], head, b"x" * 400
    )  # 10 bytes/s: 40 s if it were let through
    assert took is not None and took < 10  # due after 0.5 s + 400/64 s = 6.75 s
    ok = requests.post(f"http://127.0.0.1:{served.server_address[1]}/", data=b"y" * 300, timeout=5)
    assert ok.content == b"y" * 300  # a prompt client is served, at any size


def test_a_connection_waiting_for_its_body_can_make_room_for_a_new_one(server):
    served = server(max_connections=1, head_seconds=30)
    port = served.server_address[1]
    slow = socket.create_connection(("127.0.0.1", port))
    slow.settimeout(5)
    slow.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nab")
    deadline = time.monotonic() + 5
    while not served._waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # (its head arrived: now it waits for its body)
    assert get(served).text == "ok"
    assert slow.recv(1) == b""  # shut to make room
    slow.close()


def test_a_malformed_or_cut_off_request_head_is_a_bad_request(server):
    """A header line without its colon (what is left of a head whose client closed in the
    middle of it) was read as a request without those headers, and the receiver counted a
    cut connection as an unsupported media type."""
    served = server()
    with socket.create_connection(served.server_address, timeout=5) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le\r\n\r\n")
        answer = b""
        while chunk := conn.recv(4096):  # (the server closes the connection after it)
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400") and b"incomplete or malformed" in answer
    assert get(served).text == "ok"  # and it keeps serving
    # a multipart body is none of the head's business (its parser reports its defects too)
    url = f"http://127.0.0.1:{served.server_address[1]}/"
    posted = requests.post(url, files={"f": ("a.txt", b"xyz")}, timeout=5)
    assert posted.status_code == 200 and b"xyz" in posted.content


def answer_to(served, data: bytes) -> bytes:
    """What the server answers ``data`` sent on a new connection whose client then closes
    its side (read until the server closes the connection)."""
    with socket.create_connection(served.server_address, timeout=5) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


def test_a_head_cut_off_before_its_blank_line_is_a_bad_request_not_a_request(server):
    """The standard library takes the end of input for the blank line ending a head: a
    client gone mid-head had what arrived served as a whole request (here, 200 ok)."""
    served = server()
    for head in (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"GET / HTTP/1.1\r\n", b"GET / HT"):
        answer = answer_to(served, head)
        assert answer.startswith(b"HTTP/1.1 400 ") and b"cut off" in answer, (head, answer)
    assert answer_to(served, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").endswith(b"ok")


def test_a_malformed_request_line_gets_a_status_line_and_headers(server):
    """Errors answered before the request line was parsed were written the HTTP/0.9 way (the
    standard library's default version then): a bare body, no status line or headers."""
    served = server()
    for line, status in ((b"GARBAGE", 400), (b"GET / HTTP/1.1 x", 400), (b"PRI * HTTP/2.0", 505)):
        answer = answer_to(served, line + b"\r\n\r\n")
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
        assert b"\r\nContent-Length: " in answer and b"\r\nConnection: close" in answer
    assert get(served).text == "ok"


def test_a_connection_the_server_shuts_mid_head_is_not_answered(server):
    """Shut for its deadline, a head is not cut off by its client: not answered 400, and
    handed to the handler's ``connection_shut`` with the reason."""
    from agent_replay.httpserver import LATE

    shut = []

    class Counting(Hello):
        def connection_shut(self, why: str) -> None:
            shut.append(why)

    served = GuardedHTTPServer(("127.0.0.1", 0), Counting)
    served.head_seconds = 0.3
    threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05}).start()
    try:
        with socket.create_connection(served.server_address, timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert conn.recv(100) == b""  # shut, unanswered
        deadline = time.monotonic() + 5
        while not shut and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shut == [LATE]
    finally:
        served.shutdown()
        served.server_close()
