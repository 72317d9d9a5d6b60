// One app: what it runs, its tasks (node, GPU UUIDs, state, health, ports,
// start), its deployments and last failure, and the actions users expect —
// scale, restart, suspend (scale to 0), delete, kill a task — each confirmed.

(function (ui) {
  "use strict";

  const { ApiError, appPath, call, get } = ui.api;
  const { confirmAction, notice } = ui.dialogs;
  const { h, plural, replace, shortUuid, time } = ui.dom;
  const { containerImage, gpuType, status } = ui.apps;
  const { stateWord, taskShort } = ui.nodes;

  function create(main, { appId }) {
    const region = h("div", { id: "app-page" }, h("p", { class: "muted" }, "Loading…"));
    replace(main, region);
    const base = `v2/apps${appPath(appId)}`;
    let app = null;
    let typed = null;          // instances typed but not applied yet: kept over refreshes

    async function act(what, method, path, body, after) {
      try {
        let result;
        try {
          result = await call(method, path, body);
        } catch (error) {
          if (!(error instanceof ApiError) || error.status !== 409) throw error;
          const force = await confirmAction({ title: "A deployment is in progress",
            text: `${error.message} Replace the running deployment of ${appId}?`, action: "Force it" });
          if (!force) return;
          result = await call(method, path + (path.includes("?") ? "&" : "?") + "force=true", body);
        }
        notice(`${what}${result && result.deploymentId ? ` (deployment ${result.deploymentId.slice(0, 8)})` : ""}.`);
        if (after) after();
        else page.refresh().catch(() => {});
      } catch (error) {
        notice(`${what} failed: ${error.message}`, "error");
      }
    }

    async function scale(to) {
      if (!Number.isInteger(to) || to < 0) {
        notice("Instances must be a whole number, 0 or more.", "error");
        return;
      }
      const ok = await confirmAction({ title: `Scale ${appId}`,
        text: `Scale ${appId} from ${app.instances} to ${plural(to, "instance")}` +
          (app.gpus ? ` (${plural(to * app.gpus, "GPU")} in all)?` : "?"),
        action: `Scale to ${to}`, danger: to < app.instances });
      if (ok) {
        typed = null;
        act(`Scaling ${appId} to ${to}`, "PUT", base, { instances: to });
      }
    }

    async function restart() {
      if (await confirmAction({ title: `Restart ${appId}`, action: "Restart",
        text: `Replace every task of ${appId} with a new one (a rolling restart, as its upgrade strategy says)?` })) {
        act(`Restarting ${appId}`, "POST", `${base}/restart`);
      }
    }

    async function suspend() {
      if (await confirmAction({ title: `Suspend ${appId}`, action: "Suspend",
        text: `Scale ${appId} to 0 instances? Its ${plural(app.tasksRunning, "running task")} will be killed and their GPUs freed; the app stays defined.` })) {
        act(`Suspending ${appId}`, "PUT", base, { instances: 0 });
      }
    }

    async function remove() {
      if (await confirmAction({ title: `Delete ${appId}`, action: "Delete",
        text: `Delete ${appId} and kill its ${plural(app.tasksRunning + app.tasksStaged, "task")}? This cannot be undone.` })) {
        act(`Deleting ${appId}`, "DELETE", base, undefined, () => { location.hash = "#/apps"; });
      }
    }

    async function kill(task) {
      const scaleDown = h("input", { type: "checkbox", id: "kill-scale" });
      const ok = await confirmAction({ title: "Kill task", action: "Kill task",
        text: `Kill task ${task.id} on ${task.host || "its node"}? Without scaling down, a new task replaces it.`,
        extra: [h("p", { class: "check" }, scaleDown, h("label", { for: "kill-scale" }, "and scale the app down by one"))] });
      if (ok) {
        const query = scaleDown.checked ? "?scale=true" : "";
        act(`Killing ${taskShort(task.id)}`, "DELETE", `${base}/tasks/${encodeURIComponent(task.id)}${query}`);
      }
    }

    function draw(tasks, deployments) {
      const [kind, word] = status(app);
      const count = h("input", { id: "scale-to", type: "number", min: "0", step: "1",
        value: typed === null ? String(app.instances) : typed, class: "narrow", dataset: { key: "scale-to" },
        oninput: (event) => { typed = event.target.value; } });
      const failure = app.lastTaskFailure;
      replace(region,
        h("p", { class: "crumbs" }, h("a", { href: "#/apps" }, "Apps"), " / "),
        h("div", { class: "heading" }, h("h1", {}, appId), h("span", { class: `badge ${kind}` }, word)),
        h("dl", { class: "facts wide" }, [
          ["Instances", `${app.tasksRunning} running of ${app.instances}` + (app.tasksStaged ? `, ${app.tasksStaged} staging` : "")],
          ["GPUs each", String(app.gpus || 0)],
          ["GPU type", gpuType(app) || "any"],
          ["Container", `${(app.container && app.container.type) || "MESOS"}${containerImage(app) ? ` · ${containerImage(app)}` : ""}`],
          ["Command", app.cmd || (app.args || []).join(" ") || "—"],
          ["CPUs / memory", `${app.cpus} / ${app.mem} MiB`],
          ["Constraints", (app.constraints || []).map((c) => c.join(" ")).join("; ") || "none"],
          ["Version", app.version || "—"],
        ].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
        h("form", { class: "actions", "aria-label": "Actions", onsubmit: (e) => { e.preventDefault(); scale(Number(count.value)); } },
          h("label", { for: "scale-to" }, "Instances"), count,
          h("button", { type: "submit", id: "action-scale", dataset: { key: "scale" } }, "Scale"),
          h("button", { type: "button", id: "action-restart", dataset: { key: "restart" }, onclick: restart }, "Restart"),
          h("button", { type: "button", id: "action-suspend", dataset: { key: "suspend" }, onclick: suspend,
            disabled: app.instances === 0 }, "Suspend"),
          h("a", { class: "button", href: `#/edit${app.id}`, id: "action-edit" }, "Edit JSON"),
          h("button", { type: "button", id: "action-delete", class: "danger", dataset: { key: "delete" }, onclick: remove }, "Delete")),
        failure ? h("section", { class: "failure-box", "aria-label": "Last task failure" },
          h("h2", {}, "Last failure"),
          h("p", {}, h("strong", {}, stateWord(failure.state)), `: ${failure.message || "no message"} `,
            "(task ", h("code", {}, failure.taskId), failure.host ? ` on ${failure.host}` : "", ", ", time(failure.timestamp), ")")) : null,
        h("h2", {}, "Tasks"),
        tasks.length ? taskTable(tasks, kill) : h("p", { class: "empty" }, "No tasks."),
        h("h2", {}, "Deployments"),
        deployments.length ? h("ul", { class: "deployments" }, deployments.map((d) => h("li", {},
          h("code", { title: d.id }, d.id.slice(0, 8)), ` step ${d.currentStep} of ${d.totalSteps}: `,
          (d.currentActions || []).map((a) => `${a.action} ${a.app}`).join(", ") || "—")))
          : h("p", { class: "muted" }, "None in progress."),
        h("details", {}, h("summary", {}, "Definition (JSON)"),
          h("pre", { class: "json" }, JSON.stringify(definition(app), null, 2))));
    }

    const page = {
      async refresh() {
        let shown, tasks, deployments;
        try {
          [shown, tasks, deployments] = await Promise.all([
            get(base), get(`${base}/tasks?gpus=true`), get("v2/deployments")]);
        } catch (error) {
          if (error instanceof ApiError && error.status === 404) {
            replace(region, h("h1", {}, appId), h("p", { class: "empty" }, `App ${appId} does not exist (any more). `,
              h("a", { href: "#/apps" }, "All apps")));
            return;
          }
          throw error;
        }
        app = shown.app;
        draw(tasks.tasks, deployments.filter((d) => (d.affectedApps || []).includes(appId)));
      },
      relevant: (type, event) => type !== "event_stream_attached" && type !== "event_stream_detached" &&
        (!event.appId || event.appId === appId),
    };
    return page;
  }

  function taskTable(tasks, kill) {
    return h("table", { class: "tasks" },
      h("caption", { class: "visually-hidden" }, "Tasks"),
      h("thead", {}, h("tr", {}, ["Task", "Node", "GPUs", "State", "Health", "Ports", "Started", ""]
        .map((title) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, tasks.map((task) => h("tr", { dataset: { task: task.id } },
        h("th", { scope: "row", "data-label": "Task" }, h("code", { title: task.id }, taskShort(task.id))),
        h("td", { "data-label": "Node" }, task.host || "—"),
        h("td", { "data-label": "GPUs", class: "uuids" }, (task.gpuUuids || []).length
          ? task.gpuUuids.map((u) => h("code", { title: u, dataset: { uuid: u } }, shortUuid(u)))
          : "—"),
        h("td", { "data-label": "State" }, h("span", { class: `badge ${stateWord(task.state)}` }, stateWord(task.state))),
        h("td", { "data-label": "Health" }, health(task)),
        h("td", { "data-label": "Ports" }, (task.ports || []).join(", ") || "—"),
        h("td", { "data-label": "Started" }, time(task.startedAt)),
        h("td", {}, h("button", { type: "button", class: "danger small", dataset: { key: `kill-${task.id}` },
          "aria-label": `Kill task ${task.id}`, onclick: () => kill(task) }, "Kill"))))));
  }

  function health(task) {
    const results = task.healthCheckResults || [];
    if (!results.length) return "—";
    const alive = results.every((r) => r.alive);
    return h("span", { class: `badge ${alive ? "running" : "failed"}` }, alive ? "healthy" : "unhealthy");
  }

  // The definition as a user would PUT it back: without the status fields.
  function definition(app) {
    const out = { ...app };
    for (const key of ["tasks", "tasksStaged", "tasksRunning", "tasksHealthy", "tasksUnhealthy",
      "deployments", "lastTaskFailure", "versionInfo", "version", "readinessCheckResults", "taskStats"]) {
      delete out[key];
    }
    return out;
  }

  ui.appPage = { create, definition };
})(window.MesosGpu = window.MesosGpu || {});
