#!/usr/bin/env python3
"""A foreign sender blasting a running pipecast job's multicast group (issue 32's soak;
bench/mcast_soak.sh). Root, inside one of a lab's machine namespaces:

    python3 bench/mcast_flood.py --iface eth0 --pps 2000 --seconds 600

It sniffs the interface (AF_PACKET) for the job's group frames (UDP to 239.192.0.0/14, the
organization-local scope pipecast derives its groups from), learns the group, port, cookie
(from a control frame: a sync or probe; data frames carry only a 32-bit tag of it) and latest
broadcast number from them, and sends to that group and port, from its own socket
(an address no rank has), a mix of:

  junk      random bytes of random length (0-1500): fail the bounds or the checksum;
  foreign   well-formed data frames (version 2, checksum right) of another job's cookie;
  spoofed   well-formed data, ack, NACK and abort frames with the job's cookie and the
            current broadcast number, naming rank 0..7 as sender: their source is no rank's;
  replayed  copies of frames the job itself sent (spoofed too: another source).

A rank must drop all of them (`mcast_drop_malformed/checksum/foreign/spoofed` count them) and
every broadcast stays byte-exact. Prints what it sent on SIGTERM, SIGINT or at the end.
Not pipecast code: the frame layout is docs/multicast.md's (src/wire/mcast.rs).
"""

import argparse
import os
import random
import signal
import socket
import struct
import sys
import time

ETH_P_IP = 0x0800


def crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


VERSION = 2


def tag(cookie):
    """The cookie as a data frame carries it: its halves folded (wire::mcast::cookie_tag)."""
    return (cookie ^ (cookie >> 32)) & 0xFFFFFFFF


def frame(kind, flags, sender, cookie, bseq, msize, segment, index, count, root, value, to,
          payload=b""):
    """A version-2 frame. Data (kind 1): the 32-byte header (cookie tag, broadcast number,
    index, u16 count, a 16-bit check of root and sizes; CRC over bytes 0..28, then the
    payload). Any other kind: the 64-byte control header (CRC over bytes 0..60), no payload."""
    if kind == 1:
        check = crc32c(struct.pack("<IQI", root, msize, segment))
        h = struct.pack("<BBHIIQIHH", VERSION, 1, flags, sender, tag(cookie), bseq, index,
                        len(payload), (check ^ (check >> 16)) & 0xFFFF)
        assert len(h) == 28
        return h + struct.pack("<I", crc32c(payload, crc32c(h))) + payload
    h = struct.pack("<BBHIQQQIIIIQI", VERSION, kind, flags, sender, cookie, bseq, msize,
                    segment, index, count, root, value, to)
    assert len(h) == 60
    return h + struct.pack("<I", crc32c(h))


def bseq_of(body):
    """The broadcast number of a version-2 frame."""
    at = 12 if body[1] == 1 else 16
    return struct.unpack("<Q", body[at:at + 8])[0]


def learn(sniffer, deadline):
    """(group, port, header) of the first group control frame (it carries the whole cookie)
    seen before `deadline`."""
    while time.time() < deadline:
        try:
            pkt = sniffer.recv(65536)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        got = parse(pkt)
        if got and got[2][1] != 1 and len(got[2]) >= 64:
            return got
    return None


def parse(pkt):
    if len(pkt) < 14 + 20 + 8 + 32 or struct.unpack("!H", pkt[12:14])[0] != ETH_P_IP:
        return None
    ip = pkt[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 17 or ip[16] != 239 or ip[17] & 0xFC != 192:
        return None
    dst = socket.inet_ntoa(ip[16:20])
    udp = ip[ihl:]
    port = struct.unpack("!H", udp[2:4])[0]
    body = udp[8:]
    if len(body) < 32 or body[0] != VERSION or (body[1] != 1 and len(body) < 64):
        return None
    return dst, port, bytes(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--pps", type=float, default=2000.0, help="frames per second sent")
    ap.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    ap.add_argument("--learn-seconds", type=float, default=120.0,
                    help="give up when no group frame was seen within this long")
    args = ap.parse_args()

    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    sniffer.bind((args.iface, 0))
    sniffer.setblocking(False)
    got = learn(sniffer, time.time() + args.learn_seconds)
    if not got:
        print("flood: no group frame seen", file=sys.stderr)
        return 1
    group, port, first = got
    cookie = struct.unpack("<Q", first[8:16])[0]
    bseq = bseq_of(first)
    print(f"flood: group {group}:{port}, cookie {cookie:#x}", file=sys.stderr, flush=True)

    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # Out of the sniffed interface (struct ip_mreqn by index): without it, or a route for
    # 224.0.0.0/4, the kernel has no way to the group.
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                   struct.pack("4s4si", b"\0" * 4, b"\0" * 4, socket.if_nametoindex(args.iface)))
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    replay = [first]
    sent = {"junk": 0, "foreign": 0, "spoofed": 0, "replayed": 0, "failed": 0}
    first_error = None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    rng = random.Random(32)
    start = time.time()
    n = 0
    while not stop and time.time() - start < args.seconds:
        # Keep up with the job: its latest broadcast number, frames to replay.
        for _ in range(16):
            try:
                pkt = sniffer.recv(65536)
            except BlockingIOError:
                break
            p = parse(pkt)
            if p and p[0] == group and p[1] == port:
                bseq = max(bseq, bseq_of(p[2]))
                if len(replay) < 64:
                    replay.append(p[2])
                else:
                    replay[rng.randrange(64)] = p[2]
        pick = rng.random()
        if pick < 0.3:
            what, data = "junk", os.urandom(rng.randrange(0, 1500))
        elif pick < 0.45:
            what = "foreign"
            data = frame(1, 0, rng.randrange(8), cookie ^ (1 + rng.randrange(1 << 32)), bseq,
                         1 << 20, 1408, rng.randrange(745), 16, 0, 0, 0xFFFFFFFF,
                         os.urandom(16))
        elif pick < 0.7:
            what = "spoofed"
            kind = rng.choice([1, 2, 3, 6])
            b = max(0, bseq + rng.randrange(-1, 3))
            data = frame(kind, 0, rng.randrange(8), cookie, b, 1 << 20, 1408,
                         rng.randrange(745), 16 if kind == 1 else rng.randrange(4), 0,
                         rng.randrange(1000), 0xFFFFFFFF if kind == 1 else rng.randrange(8),
                         os.urandom(16) if kind == 1 else b"")
        else:
            what, data = "replayed", rng.choice(replay)
        try:
            out.sendto(data, (group, port))
            sent[what] += 1
        except OSError as e:
            sent["failed"] += 1
            first_error = first_error or e
        n += 1
        ahead = start + n / args.pps - time.time()
        if ahead > 0:
            time.sleep(ahead)
    print("flood: sent " + ", ".join(f"{k} {v}" for k, v in sent.items())
          + (f" (first error: {first_error})" if first_error else ""), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
