// Jobs: each job with its gang size, GPUs per task, success and failure counts,
// and its active runs: state, attempt, why it waits, and each rank's node and GPUs.
// Data: GET /v1/jobs?embed=activeRuns&embed=historySummary&detail=true (polled:
// runs change without /v2 events).

(function (ui) {
  "use strict";

  const { get } = ui.api;
  const { h, plural, replace } = ui.dom;
  const POLL_MS = 2000;

  function create(main) {
    const summary = h("p", { id: "jobs-summary", class: "summary" }, "Loading…");
    const region = h("div", { id: "jobs" });
    replace(main, h("div", { class: "heading" }, h("h1", {}, "Jobs")), summary, region);

    function draw(jobs) {
      const runs = jobs.reduce((n, job) => n + (job.activeRuns || []).length, 0);
      const waiting = jobs.reduce((n, job) =>
        n + (job.activeRuns || []).filter((run) => run.status === "STARTING").length, 0);
      summary.textContent = `${plural(jobs.length, "job")} · ${plural(runs, "active run")}` +
        (waiting ? ` · ${waiting} waiting to start` : "");
      if (!jobs.length) {
        replace(region, h("p", { class: "empty" }, "No jobs yet. Create them through /v1/jobs."));
        return;
      }
      replace(region, h("table", { class: "apps jobs" },
        h("caption", { class: "visually-hidden" }, "Jobs"),
        h("thead", {}, h("tr", {}, ["Job", "Tasks", "GPUs each", "Succeeded", "Failed", "Active runs"]
          .map((title) => h("th", { scope: "col" }, title)))),
        h("tbody", {}, jobs.map(row))));
    }

    return {
      async refresh() {
        const jobs = await get("v1/jobs?embed=activeRuns&embed=historySummary&detail=true");
        jobs.sort((a, b) => a.id.localeCompare(b.id));
        draw(jobs);
      },
      relevant: () => false,
      pollMs: POLL_MS,
    };
  }

  function row(job) {
    const history = job.historySummary || {};
    return h("tr", { dataset: { job: job.id } },
      h("th", { scope: "row", "data-label": "Job" }, job.id),
      h("td", { "data-label": "Tasks" }, String(job.run.instances || 1)),
      h("td", { "data-label": "GPUs each" }, String(job.run.gpus || 0)),
      h("td", { "data-label": "Succeeded" }, String(history.successCount || 0)),
      h("td", { "data-label": "Failed" }, String(history.failureCount || 0)),
      h("td", { "data-label": "Active runs" }, (job.activeRuns || []).length
        ? h("ul", { class: "runs" }, job.activeRuns.map(run)) : "—"));
  }

  function run(r) {
    const kind = r.status === "ACTIVE" ? "running" : "waiting";
    return h("li", { class: "run", dataset: { run: r.id, status: r.status } },
      h("span", { class: `badge ${kind}` }, r.status === "ACTIVE" ? "Running" : "Waiting"), " ",
      h("code", {}, r.id), r.attempt > 1 ? ` (attempt ${r.attempt})` : "",
      r.status === "STARTING" && r.reason ? h("p", { class: "reason" }, r.reason) : null,
      h("ul", { class: "ranks" }, (r.ranks || []).map((rank) =>
        h("li", { class: "rank", dataset: { rank: String(rank.rank), state: rank.state } },
          `rank ${rank.rank}: `, rank.host ? `${rank.host}` : "not placed",
          rank.gpus && rank.gpus.length ? ` · ${plural(rank.gpus.length, "GPU")} ${rank.gpus.join(", ")}` : "",
          ` · ${rank.state.replace(/^TASK_/, "").toLowerCase()}`))));
  }

  ui.jobs = { create };
})(window.MesosGpu = window.MesosGpu || {});
