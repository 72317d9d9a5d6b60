"""The glyphnet workload on this machine's CPU: data, model, and the training job
run as its own process (`python -m glyphnet train`), as a task runs it."""
import os

import numpy as np
import pytest

from localcluster.cognitive.glyphnet import glyphs, mlp
from tests.bed.glyphnet import run_glyphnet


def test_glyphs_are_distinct_8x8_bitmaps():
    t = glyphs.templates()
    assert t.shape == (10, 64) and set(np.unique(t)) == {0.0, 1.0}
    distances = [int(np.abs(t[i] - t[j]).sum()) for i in range(10) for j in range(i + 1, 10)]
    assert min(distances) >= 4, "two glyphs are too alike to learn apart"
    assert glyphs.render(t[7]) == list(glyphs.BITMAPS["7"])


@pytest.mark.parametrize("rows, error", [
    (["........"] * 7, "expected 8 rows, got 7"),
    (["........"] * 7 + ["...x...."], "row 7: expected 8 characters"),
    (["........"] * 7 + ["..."], "row 7: expected 8 characters"),
])
def test_bad_bitmaps_are_named(rows, error):
    with pytest.raises(ValueError, match=error):
        glyphs.rows_to_pixels(rows)


def test_dataset_is_deterministic_noisy_and_shifted():
    x1, y1 = glyphs.make_dataset(300, seed=3)
    x2, y2 = glyphs.make_dataset(300, seed=3)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert x1.shape == (300, 64) and x1.dtype == np.float32 and set(y1) == set(range(10))
    clean = glyphs.templates()[y1]
    assert np.abs(x1 - clean).mean() > 0.2          # noise and shifts, not copies
    assert not np.array_equal(glyphs.make_dataset(300, seed=4)[0], x1)


def test_shift_moves_without_wrapping():
    img = np.zeros((8, 8), np.float32)
    img[0, 7] = 1.0
    assert glyphs.shift(img, 1, 0)[1, 7] == 1.0
    assert glyphs.shift(img, 0, 1).sum() == 0.0     # pushed off the edge, not wrapped
    assert glyphs.shift(img, -1, -1).sum() == 0.0


def test_gradients_match_finite_differences():
    """The hand-written backward pass is right: compare with numerical gradients."""
    import copy
    rng = np.random.default_rng(0)
    model = mlp.init(6, 5, ("a", "b", "c"), seed=1)
    model.b1 += 0.1                                  # keep ReLUs away from their kink
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = np.array([0, 2, 1, 2])
    stepped = copy.deepcopy(model)
    mlp.step(stepped, {}, x, y, np.matmul, lr=1.0, momentum=0.0)    # w - 1.0 * grad

    def loss(m):
        _, p = mlp.forward(m, x.astype(np.float64), np.matmul)
        return -np.log(p[np.arange(4), y]).mean()

    for name in ("w1", "b1", "w2", "b2"):
        trial = copy.deepcopy(model)
        original = getattr(model, name).astype(np.float64)
        numeric = np.zeros_like(original)
        for idx in np.ndindex(original.shape):
            for sign in (1, -1):
                bumped = original.copy()
                bumped[idx] += sign * 1e-4
                setattr(trial, name, bumped)
                numeric[idx] += sign * loss(trial) / 2e-4
        analytic = getattr(model, name) - getattr(stepped, name)
        assert np.allclose(analytic, numeric, atol=2e-3), name


def test_save_is_atomic_and_round_trips(tmp_path):
    model = mlp.init(64, 8, glyphs.CLASSES, seed=0)
    model.meta = {"test_accuracy": 0.5}
    path = tmp_path / "sub" / "m.npz"
    mlp.save(model, str(path))
    back = mlp.load(str(path))
    assert back.classes == glyphs.CLASSES and back.meta == {"test_accuracy": 0.5}
    assert np.array_equal(back.w1, model.w1) and back.shape == "64-8-10"
    assert os.listdir(path.parent) == ["m.npz"]       # no temp file left


def test_training_job_learns_on_the_cpu_and_says_it_fell_back(tmp_path):
    out = tmp_path / "model.npz"
    r = run_glyphnet(["train", "--epochs", "8", "--samples", "6000", "--out", str(out),
                      "--min-accuracy", "0.9"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    fallback = [line for line in lines if "falling back to numpy on the CPU" in line]
    assert len(fallback) == 1 and "no CUDA driver library" in fallback[0], r.stdout
    epochs = [line for line in lines if " epoch " in line]
    assert len(epochs) == 8 and "loss" in epochs[0] and "test acc" in epochs[-1]
    first_loss = float(epochs[0].split("loss ")[1].split()[0])
    last_loss = float(epochs[-1].split("loss ")[1].split()[0])
    assert last_loss < first_loss / 3
    model = mlp.load(str(out))
    assert model.meta["compute"] == "cpu" and model.meta["test_accuracy"] >= 0.9
    # The saved model classifies the clean glyphs (which it never saw) correctly.
    best, _ = mlp.predict(model, glyphs.templates(), np.matmul)
    assert [model.classes[i] for i in best] == list(glyphs.CLASSES)


def test_training_defaults_to_the_sandbox_and_fails_below_min_accuracy(tmp_path):
    r = run_glyphnet(["train", "--epochs", "1", "--samples", "100", "--min-accuracy", "0.99",
                      "--device", "cpu"], env={"MESOS_SANDBOX": str(tmp_path)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "compute: CPU (numpy" in r.stdout and "(--device cpu)" in r.stdout
    assert "FAILED: test accuracy" in r.stdout
    assert (tmp_path / "glyphnet.npz").exists()      # saved even so, for a look


@pytest.mark.parametrize("args, error", [
    (["train", "--epochs", "0"], "--epochs: expected a positive integer"),
    (["train", "--device", "tpu"], "argument --device: invalid choice"),
    (["serve", "--model", "/nonexistent/m.npz", "--device", "cpu"],
     "--model: /nonexistent/m.npz does not exist"),
    (["train", "--device", "gpu", "--epochs", "1"], "--device gpu: no usable GPU: no CUDA driver library"),
])
def test_bad_arguments_are_one_clear_error(args, error):
    r = run_glyphnet(args, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert error in r.stderr


def test_help_explains_every_command():
    r = run_glyphnet(["--help"])
    assert r.returncode == 0 and "train" in r.stdout and "serve" in r.stdout
    r = run_glyphnet(["serve", "--help"])
    assert "/predict" in r.stdout and "$PORT0" in r.stdout and "--duration" in r.stdout
