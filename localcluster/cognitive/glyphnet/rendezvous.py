"""Data-parallel training over a gang's rendezvous, without PyTorch.

A job of several instances gets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (the
names torch.distributed reads). Each rank trains on its own share of the data; after
every epoch the ranks average their weights through rank 0, which listens on
MASTER_PORT (a port of its own offer): an all-reduce over TCP, as torch's gloo
backend would do it. A peer that cannot reach rank 0 within the timeout, or a rank
that drops out, fails the run (its gang is then ended and restarted whole).
"""
import io
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

TIMEOUT = 120.0


@dataclass
class Rendezvous:
    rank: int
    world: int
    address: str
    port: int
    peers: List[socket.socket]

    @classmethod
    def from_env(cls, env=os.environ) -> Optional["Rendezvous"]:
        """None when the task is no member of a gang of several (WORLD_SIZE 1 or unset)."""
        world = int(env.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return None
        return cls(int(env["RANK"]), world, env["MASTER_ADDR"], int(env["MASTER_PORT"]), [])

    def meet(self, timeout: float = TIMEOUT) -> None:
        """Rank 0 accepts every other rank; the others connect to it."""
        deadline = time.monotonic() + timeout
        if self.rank == 0:
            server = socket.create_server(("", self.port))
            server.settimeout(timeout)
            with server:
                while len(self.peers) < self.world - 1:
                    peer, _ = server.accept()
                    peer.settimeout(timeout)
                    self.peers.append(peer)
            return
        while True:
            try:
                peer = socket.create_connection((self.address, self.port), timeout=5)
                peer.settimeout(timeout)
                self.peers.append(peer)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise OSError(f"rank {self.rank}: rank 0 at {self.address}:{self.port} "
                                  f"did not answer within {timeout:.0f} s") from None
                time.sleep(0.2)

    def average(self, arrays: List[np.ndarray]) -> List[np.ndarray]:
        """The mean of each array over all ranks (every rank gets the same)."""
        if self.rank != 0:
            _send(self.peers[0], arrays)
            return _receive(self.peers[0])
        total = [a.astype(np.float64) for a in arrays]
        for peer in self.peers:
            for mine, theirs in zip(total, _receive(peer)):
                mine += theirs
        mean = [(t / self.world).astype(a.dtype) for t, a in zip(total, arrays)]
        for peer in self.peers:
            _send(peer, mean)
        return mean

    def close(self) -> None:
        for peer in self.peers:
            peer.close()


def _send(peer: socket.socket, arrays: List[np.ndarray]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    data = buffer.getvalue()
    peer.sendall(struct.pack("!Q", len(data)) + data)


def _receive(peer: socket.socket) -> List[np.ndarray]:
    size = struct.unpack("!Q", _exactly(peer, 8))[0]
    with np.load(io.BytesIO(_exactly(peer, size))) as found:
        return [found[f"arr_{i}"] for i in range(len(found.files))]


def _exactly(peer: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = peer.recv(min(left, 1 << 20))
        if not chunk:
            raise OSError("a rank left the rendezvous")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
