"""A tiny DNS server for the resolver's tests: UDP and TCP on 127.0.0.1, one port for both,
answering a fixed zone under `test.`; beside it a UDP socket that never answers. The first
line of stdout is "PORT SILENT_PORT". The zone:

  a.test        A 10.0.0.1, AAAA fd00::1
  v4.test       A 10.0.0.2 (AAAA: an empty answer)
  alias.test    CNAME a.test (the answer carries a.test's records too)
  short.test    A 10.0.0.3 (for the search list)
  nodata.test   no records (NOERROR, empty)
  fail.test     SERVFAIL
  big.test      over UDP: truncated (TC, no records); over TCP: A 10.1.0.1 .. 10.1.0.40
  slow.test     A 10.2.0.1, answered after 50 ms
  refused.test  REFUSED; notimp.test NOTIMP; formerr.test FORMERR
  v4refused.test A 10.0.0.4 (AAAA: REFUSED)
  mix.test      A 10.0.0.5, 169.254.1.1; AAAA fd00::5, 2001:db8::5, 2002:c000:201::1,
                2001::1, fec0::1 (for gai.conf's tables)
  PTR 10.0.0.1 and fd00::1: a.test; 10.0.0.66: SERVFAIL; 10.0.0.67: REFUSED
  anything else NXDOMAIN

Every query is counted by name and transport; `stats` on stdin prints the counts."""

import asyncio
import errno
import socket
import struct
import sys

A, AAAA, CNAME, SOA = 1, 28, 5, 6
ZONE = {
    "a.test.": [(A, "10.0.0.1"), (AAAA, "fd00::1")],
    "v4.test.": [(A, "10.0.0.2")],
    "short.test.": [(A, "10.0.0.3")],
    "slow.test.": [(A, "10.2.0.1")],
    "nodata.test.": [],
}
CNAMES = {"alias.test.": "a.test."}
# Names answered with an error code (the low bits of the flags).
RCODES = {"fail.test.": 2, "66.0.0.10.in-addr.arpa.": 2, "refused.test.": 5,
          "67.0.0.10.in-addr.arpa.": 5, "notimp.test.": 4, "formerr.test.": 1}
ZONE["v4refused.test."] = [(A, "10.0.0.4")]
ZONE["mix.test."] = [(A, "10.0.0.5"), (A, "169.254.1.1"), (AAAA, "fd00::5"), (AAAA, "2001:db8::5"),
                     (AAAA, "2002:c000:201::1"), (AAAA, "2001::1"), (AAAA, "fec0::1")]
PTR = 12
ZONE["1.0.0.10.in-addr.arpa."] = [(PTR, "a.test.")]
ZONE["1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa."] = [(PTR, "a.test.")]
BIG = [(A, "10.1.0.%d" % i) for i in range(1, 41)]
counts = {}


def name_at(msg, off):
    labels = []
    while True:
        n = msg[off]
        if n == 0:
            return ".".join(labels) + ".", off + 1
        labels.append(msg[off + 1:off + 1 + n].decode())
        off += 1 + n


def enc_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def rr(name, rtype, data):
    if rtype == A:
        rdata = bytes(int(x) for x in data.split("."))
    elif rtype == AAAA:
        import ipaddress
        rdata = ipaddress.IPv6Address(data).packed
    elif rtype in (CNAME, PTR):
        rdata = enc_name(data)
    else:
        rdata = data
    return enc_name(name) + struct.pack(">HHIH", rtype, 1, 60, len(rdata)) + rdata


def answer(msg, tcp):
    qid, _flags, qd = struct.unpack(">HHH", msg[:6])
    if qd != 1:
        return None
    qname, off = name_at(msg, 12)
    qtype, _qclass = struct.unpack(">HH", msg[off:off + 4])
    question = msg[12:off + 4]
    key = qname.lower()
    counts[(key, "tcp" if tcp else "udp")] = counts.get((key, "tcp" if tcp else "udp"), 0) + 1
    flags = 0x8180  # QR, RD, RA
    records = []
    if key in RCODES:
        flags |= RCODES[key]
    elif key == "v4refused.test." and qtype == AAAA:
        flags |= 5
    elif key == "big.test.":
        if tcp:
            records = [rr(qname, t, d) for t, d in BIG if t == qtype]
        else:
            flags |= 0x0200
    elif key in CNAMES:
        target = CNAMES[key]
        records.append(rr(qname, CNAME, target))
        records += [rr(target, t, d) for t, d in ZONE[target] if t == qtype]
    elif key in ZONE:
        records = [rr(qname, t, d) for t, d in ZONE[key] if t == qtype]
    else:
        flags |= 3
    auth = []
    if not records and flags & 0xF in (0, 3) and not flags & 0x0200:
        soa = enc_name("ns.test.") + enc_name("root.test.") + struct.pack(">IIIII", 1, 60, 60, 60, 60)
        auth.append(rr("test.", SOA, soa))
    head = struct.pack(">HHHHHH", qid, flags, 1, len(records), len(auth), 0)
    return head + question + b"".join(records) + b"".join(auth), key == "slow.test."


class Udp(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        r = answer(data, False)
        if r is None:
            return
        reply, slow = r
        if slow:
            asyncio.get_running_loop().call_later(0.05, self.transport.sendto, reply, addr)
        else:
            self.transport.sendto(reply, addr)


async def tcp_client(reader, writer):
    try:
        while True:
            n = struct.unpack(">H", await reader.readexactly(2))[0]
            r = answer(await reader.readexactly(n), True)
            if r is None:
                break
            writer.write(struct.pack(">H", len(r[0])) + r[0])
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


async def main():
    loop = asyncio.get_running_loop()
    # TCP and UDP on one port number: the kernel picks a free TCP port, whose UDP twin
    # may be taken (by another test's client socket); then another pick.
    for attempt in range(100):
        server = await asyncio.start_server(tcp_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            udp, _ = await loop.create_datagram_endpoint(Udp, local_addr=("127.0.0.1", port))
            break
        except OSError as e:
            server.close()
            if e.errno != errno.EADDRINUSE or attempt == 99:
                raise
    # A thousand queries arrive at once in the scale test: room for all of them.
    sock = udp.get_extra_info("socket")
    for opt in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
        try:
            if opt is not None:
                sock.setsockopt(socket.SOL_SOCKET, opt, 16 << 20)
                break
        except OSError:
            pass
    silent, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
    print(port, silent.get_extra_info("sockname")[1], flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        if line.strip() == b"stats":
            for (name, proto), n in sorted(counts.items()):
                print("%s %s %d" % (name, proto, n))
            print("end", flush=True)


asyncio.run(main())
