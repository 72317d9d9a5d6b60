"""glyphnet: the cognitive workload of the mesos-gpu example.

A glyph classifier small enough to train in seconds: the data is drawn in code
(glyphs), the model is a numpy MLP (mlp), its matrix products run on a GPU
through the CUDA driver API and a hand-written PTX kernel (cuda, kernel, gpu)
or on the CPU (backend). `python3 -m glyphnet train` is the batch job,
`python3 -m glyphnet serve` the inference service.
"""
