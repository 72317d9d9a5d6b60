"""The framework's guards on what an operator types and reads: --master
forms pymesos can use, and pymesos' log records as single lines."""
import io
import logging

import pytest

from framework import mesos_driver
from volumes.errors import UserError


@pytest.mark.parametrize("master", ["127.0.0.1:5050", "master", "http://master:5050/",
                                    "https://master:5050", "zk://a:2181,b:2181/mesos",
                                    "[::1]:5050"])
def test_master_forms_accepted(master):
    assert mesos_driver.check_master(master) == master


@pytest.mark.parametrize("master", ["", "  ", "master:0", "master:99999", "master:http",
                                    "ftp://master:5050", "http://", "zk://", "a b:5050",
                                    "http://master:5050/path"])
def test_master_forms_refused_with_the_flag_name(master):
    with pytest.raises(UserError, match=r"--master .*not a Mesos master address \(HOST:PORT"):
        mesos_driver.check_master(master)


def test_pymesos_records_are_single_lines_through_the_root_logger():
    assert logging.getLogger("pymesos").handlers == []          # its own stderr handler: gone
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError:
            logging.getLogger("pymesos.process").exception("Thread abort:")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert out.getvalue() == "Thread abort: ConnectionRefusedError: [Errno 111] Connection refused\n"
