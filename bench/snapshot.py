"""Warm restart's cost (issue 16, item 4): RouteTable.snapshot(), its JSON and a
restore, in one process, for N brokers x T topics (every topic on every broker).

    .venv/bin/python bench/snapshot.py 8 10000      # W1
"""
import sys, time, json
sys.path.insert(0, "bench")
from rmq import brokersim
from rmq.namesrv.routeinfo import RouteTable
B, T = int(sys.argv[1]), int(sys.argv[2])
topics = brokersim.topic_names(T)
body = brokersim.encode_body(topics, 1)
rt = RouteTable()
for i in range(B):
    rt.register_broker("c", brokersim.broker_addr(i), brokersim.broker_name(i), 0, "ha", body=body, now_ms=0)
t=time.perf_counter(); snap = rt.snapshot(); t1=time.perf_counter()
data = json.dumps({"format":1,"tables":snap}, separators=(",",":")).encode(); t2=time.perf_counter()
back = RouteTable(); t3=time.perf_counter(); back.restore(json.loads(data)["tables"], 0); t4=time.perf_counter()
print(f"{B}x{T}: snapshot {1e3*(t1-t):.0f} ms, json {1e3*(t2-t1):.0f} ms, {len(data)/1e6:.1f} MB; load+restore {1e3*(t4-t3):.0f} ms")
