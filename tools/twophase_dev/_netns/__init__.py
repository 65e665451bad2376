"""Network namespaces joined to this one by a veth pair, for silent network partitions in tests.

The namespace itself is :mod:`._namespace`, the ``ip``/``ss`` commands :mod:`._commands`, what a
cut did :mod:`._evidence`.

A :class:`NetworkNamespace` is a Linux network namespace (``ip netns add tp-<kind>-<pid>``) with
one veth pair: the root side (in the namespace of this process, the "root namespace" below) gets
``10.213.N.1/30``, the namespace side ``10.213.N.2/30``; ``N`` is picked per namespace (the root
side's interface is named ``tpv<N>``, so creating it claims ``N``). A server started inside with
``ip netns exec`` (``PostgresServer(netns=...)``, ``MariaDBServer(netns=...)``,
``KafkaBroker(netns=...)``) listens on ``10.213.N.2``; clients in this process reach it through the
veth and come from ``10.213.N.1``. Nothing is ever sent to an address outside the machine: both
ends of the pair are on it, IPv6 is off on them and nothing routes beyond them.

:meth:`NetworkNamespace.cut` partitions the server from the root namespace, :meth:`~.heal` ends
the partition. Nothing is reset and nobody is told: every packet is lost, both ways. Two modes,
measured on Linux 6.18 with iproute2 6.1:

``"blackhole"``
    ``ip route add blackhole 10.213.N.2/32`` in the root namespace and ``blackhole 10.213.N.1/32``
    inside. The kernel refuses each packet at the route lookup, before it leaves the sending
    namespace, so not a single frame crosses the veth.

    - *Established connections* stay ``ESTABLISHED`` and silent: a ``send`` still returns (the
      data is queued), a ``recv`` blocks. TCP keeps trying with exponential backoff (``ss -ti``
      shows ``backoff:N``), but a failed route lookup does not count as a transmission: data that
      was never sent stays "not sent" and is retried by the probe timer (each attempt adds 1 to
      ``Ip OutNoRoutes``, and to ``Tcp OutSegs``), data in flight at the cut is retried by the
      retransmission timer (``TcpExt TCPTimeouts`` grows). ``Tcp RetransSegs`` does **not**
      grow. After :meth:`~.heal` the next attempt (within the current backoff, a fraction of a
      second in a short cut) gets through and the connection continues as if nothing happened.
    - *New connections* fail at once: ``connect()`` returns ``EINVAL`` ("Invalid argument") from
      the route lookup, they do not hang. A client that reconnects during the cut sees an
      immediate error, not a timeout.

``"wire"`` (the default: what a failed switch or a dropped flow looks like)
    A permanent neighbour (ARP) entry with a made-up MAC address for the other side, on both
    sides. Packets leave the sender like on a healthy link and are lost "on the wire": the other
    side's veth receives the frames (its ``rx_packets`` grows) and drops them as addressed to
    another host, so no packet reaches its IP stack (``Ip InReceives`` stays put). TCP sees real
    losses: ``Tcp RetransSegs`` and ``TcpExt TCPTimeouts`` grow, and a new ``connect()`` hangs
    (its SYN is retransmitted) until the caller's timeout, as in a real partition.

:meth:`NetworkNamespace.counters` returns the evidence (what reached the namespace, what the root
namespace's TCP did), :meth:`~.tcp_connections` the state of each connection to the namespace,
:meth:`~.probe` whether a new TCP connection gets through.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and ``ip`` from iproute2. Runs on: the
developer's or test session's machine, never on Spark executors.
"""
