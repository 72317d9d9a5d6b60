"""The NVIDIA driver volume: ld.so.cache reading, driver components, building
and garbage-collecting nvidia_<version> volumes, image rules, and the Docker
volume plugin. Knows nothing about Mesos or the scheduler."""
