"""The dashboard's jobs view in Chromium against the framework on a real Mesos master
and agent (4 GPUs offered): a running 2-task gang shows each rank's node and state, a
run that cannot start says why, and the counts of finished runs."""
from tests.bed.browser import Browser
from tests.bed.waiting import wait_until
from tests.bed.framework_process import client_of


def test_jobs_runs_ranks_and_why_a_run_waits(start_framework, tmp_path):
    service = start_framework(tmp_path / "state", "--http_open")
    api = client_of(service)
    # the agent has GPUs: a task without any goes there only unrestricted
    for body in ({"id": "train.pair", "labels": {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"},
                  "run": {"cmd": "sleep 600", "cpus": 0.1, "mem": 32,
                                              "disk": 0, "instances": 2}},
                 {"id": "train.big", "run": {"cmd": "sleep 600", "cpus": 0.1, "mem": 32,
                                             "disk": 0, "gpus": 16}}):
        assert api.post("/v1/jobs", body).status == 201
        assert api.post(f"/v1/jobs/{body['id']}/runs", None).status == 201
    wait_until(lambda: [r["status"] for r in api.get("/v1/jobs/train.pair/runs").json]
               == ["ACTIVE"], timeout=60)
    with Browser() as browser:
        driver = browser.driver
        browser.open(f"{service.http.url}/ui/#/jobs")
        shown = browser.wait(lambda: driver.execute_script(
            "const rows = [...document.querySelectorAll('tr[data-job]')];"
            "return rows.length === 2 && rows.map(r => ({job: r.dataset.job, text: r.innerText,"
            " ranks: [...r.querySelectorAll('li.rank')].map(l => l.dataset.state)}))"),
            30, "two jobs drawn")
        by_job = {row["job"]: row for row in shown}
        assert by_job["train.pair"]["ranks"] == ["TASK_RUNNING", "TASK_RUNNING"]
        assert "rank 1: 127.0.0.1" in by_job["train.pair"]["text"]
        assert "needs 16 GPUs on one node; the largest free block offered is 4" in \
            by_job["train.big"]["text"]
        summary = driver.find_element("css selector", "#jobs-summary").text
        assert summary == "2 jobs · 2 active runs · 1 waiting to start"
        assert browser.console_errors() == []
