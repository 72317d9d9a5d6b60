"""`mesos-gpu check`: proves a GPU node end to end, on the bed and on real hosts.

Owns: the checks (NVML against the driver's own nvidia-smi, the driver volume
and its programs, CUDA through the volume alone with the compat rule's library
path, device isolation on the node's real device nodes, a running agent
daemon's health, metrics and ledger against NVML), how each is run (a private
mount namespace holding only the volume, a cgroup of its own), and the report
(PASS / FAIL / SKIP with reasons, a table or JSON).

Must not: change what a running agent daemon holds (it only reads its API), or
leave anything behind (its cgroups and mount namespaces end with the check).
What needs a kernel driver is SKIP where there is none, never PASS.
"""
