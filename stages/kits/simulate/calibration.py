"""The network constants `g3 simulate` takes from measurements, in one place, with the command that fits them.

``python examples/calibrate_network.py`` (root: it builds g3's emulated hosts, stages/kits/runtime/launch/netemu.py) times
gloo ping-pongs of 4 B … 8 MiB between two hosts at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s and fits
``t(n) = overhead + n / (share × rate)``; docs/BENCHMARKS.md ("On an emulated network: the simulator's
constants") has its output.

* ``LINK_SHARE`` — the share of a link's bytes that arrive as payload. It follows from the headers: with an
  Ethernet MTU of 1500 bytes a TCP segment carries 1448 bytes (20 of IP, 20 of TCP, 12 of the timestamps
  option every Linux connection carries) in a frame of 1514 (14 of Ethernet header), 0.956. Fitted:
  0.955–0.956 at 100 Mbit/s and 1 Gbit/s (BENCHMARKS), so it is set from the headers, not from a fit. (At 10
  Gbit/s the fit gives 1.01–1.06: there tbf's 1 ms bucket and the CPU, not the rate, bound a transfer.)
* ``MESSAGE_SECONDS`` — the one-way time of a small gloo message between two hosts, the model's per-message
  latency (`g3 simulate --latency`'s default): 90–170 µs measured at every rate (BENCHMARKS), 100 µs taken. It
  is the cost of gloo, the kernel and two Python processes on this machine's cores, not of a wire: the emulated
  links add no propagation delay.
"""

from __future__ import annotations

MTU = 1500
TCP_PAYLOAD = MTU - 20 - 20 - 12  # IP, TCP, TCP timestamps
ETHERNET_FRAME = MTU + 14
LINK_SHARE = TCP_PAYLOAD / ETHERNET_FRAME  # 0.9564
MESSAGE_SECONDS = 100e-6
