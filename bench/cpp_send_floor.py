"""How fast the official 4.x C++ client (PyPI rocketmq 0.4.4) can `send_sync` from one thread
against a server that costs nothing (issue 41's goal: 8,000 msg/s; bench/NOTES.md "One message
per request"): a bare asyncio.Protocol on rmq's event loop (uvloop) with no rmq broker code
answers the client's route query with a one-broker route to itself, every send with a canned
SEND_OK and anything else (heartbeats, unregistering) with SUCCESS. bench/cpp_send_sync.py drives
it as `bench.per_request_cost --kind cpp` drives the broker, so the two rates compare directly.
Prints the rate, the client's CPU per send (its process, all threads) and the server's.
`python -m bench.cpp_send_floor --count 10000 [--repeat 3]`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench.per_request_cost import BODY, CPP_SCRIPT, FRAMED, TOPIC, broker_cpu
from testing import processes
from testing.cpp_client import client_env, cpp_client_problem

# The canned server (arguments: the port). Frames are RocketMQ remoting frames with a JSON header
# (docs/remoting-protocol.md): length, serialize type and header length, header, body.
SERVER = FRAMED + r"""
import asyncio, json, sys
from rmq import event_loop
from rmq.broker_server.remoting.topic_route_data import BrokerData, encode_topic_route
from rmq.topic_config import QueueData
port = int(sys.argv[1])
address = f"127.0.0.1:{port}"
ROUTE = encode_topic_route([BrokerData("floor", {0: address}, "floor")], [QueueData("floor", 4, 4, 6)])
GET_ROUTEINFO_BY_TOPIC, SEND_MESSAGE, SEND_MESSAGE_V2 = 105, 10, 310

def response(opaque, ext, body=b""):
    header = json.dumps({"code": 0, "flag": 1, "language": "PYTHON", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 0, "extFields": ext}).encode()
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body

class Floor(Framed):
    offset = 0
    def frame(self, frame):
        request = json.loads(frame[8:8 + int.from_bytes(frame[5:8], "big")])
        self.transport.write(self.answer(request["code"], request["opaque"]))
    def answer(self, code, opaque):
        if code == GET_ROUTEINFO_BY_TOPIC:
            return response(opaque, {}, ROUTE)
        if code in (SEND_MESSAGE, SEND_MESSAGE_V2):
            self.offset += 1
            return response(opaque, {"msgId": "7F00000100002A9F%016X" % self.offset, "queueId": "0",
                                  "queueOffset": str(self.offset)})
        return response(opaque, {})

async def serve():
    server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()
event_loop.run(serve())
"""


def measure(count: int) -> dict[str, float]:
    """One run: the canned server started, `count` sends from bench/cpp_send_sync.py."""
    port = processes.free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the canned remoting server did not start")
        scenario = {"address": f"127.0.0.1:{port}", "topic": TOPIC, "count": count, "body": BODY.hex()}
        client = subprocess.Popen([sys.executable, str(CPP_SCRIPT), json.dumps(scenario)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=client_env())
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "ready":
            raise RuntimeError("the C++ client did not start")
        before = sum(broker_cpu(server.pid))
        client.stdin.write("go\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        server_us = (sum(broker_cpu(server.pid)) - before) / count * 1e6
        client.stdin.close()
        client.wait(60)
        if result["failed"]:
            raise RuntimeError(f"a send failed: {result['failed']}")
        return {"rate": result["rate"], "client_cpu_us": result["client_cpu_us"], "server_cpu_us": server_us}
    finally:
        server.terminate()
        server.wait(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    problem = cpp_client_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return 0
    for run in range(args.repeat):
        figures = measure(args.count)
        print(f"run {run + 1}: C++ send_sync against a canned server: {figures['rate']:,.0f} msg/s, "
              f"client CPU {figures['client_cpu_us']:.0f} µs/send, "
              f"server CPU {figures['server_cpu_us']:.0f} µs/send",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
