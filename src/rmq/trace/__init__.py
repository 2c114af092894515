"""Traces: remoting traffic recorded frame by frame, and what reads and analyses it.

- :mod:`.segments`: the recorder (``rmq namesrv --trace-dir``) and the segment files
  it writes, read back as records or rows; the NameServer needs only this;
- :mod:`.rows`: the trace row schema both cores decode into (``rmq._core`` imports
  it while it is initialised, so this package's ``__init__`` imports nothing);
- :mod:`.pcap`: tcpdump captures; :mod:`.synth`: synthetic traces;
- :mod:`.analyze` (pyspark), :mod:`.arrow` (pyarrow) and :mod:`.report`
  (matplotlib): the Spark job and its report.
"""
