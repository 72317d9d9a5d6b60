"""A relative volume path is a directory of the task's sandbox
(framework/executor/sandbox.py `directory_in`): made when missing, and never
outside the sandbox, however symbolic links in it point (the bed test with a
fetched archive's link: tests/framework/marathon/test_app_features.py)."""
import os

import pytest

from framework.executor.launch_errors import TaskFailure
from framework.executor.sandbox import directory_in


def test_a_missing_directory_is_made_in_the_sandbox(tmp_path):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    made = directory_in(str(sandbox), "cache/models", "volume hostPath")
    assert made == str(sandbox / "cache" / "models") and os.path.isdir(made)
    assert directory_in(str(sandbox), "cache/models", "volume hostPath") == made   # again: same
    (sandbox / "inner").symlink_to("cache")                    # a link that stays inside is fine
    assert directory_in(str(sandbox), "inner/models", "volume hostPath") == made


@pytest.mark.parametrize("link", ["absolute", "relative"])
def test_a_link_out_of_the_sandbox_is_refused_and_nothing_is_made_there(tmp_path, link):
    sandbox, outside = tmp_path / "sandbox", tmp_path / "outside"
    sandbox.mkdir()
    outside.mkdir()
    (sandbox / "link").symlink_to(outside if link == "absolute" else "../outside")
    for relative in ("link", "link/deeper"):
        with pytest.raises(TaskFailure, match=f"volume containerPath {relative}: leaves the "
                                              f"sandbox"):
            directory_in(str(sandbox), relative, "volume containerPath")
    assert list(outside.iterdir()) == []
