// Nodes: every agent the framework has seen, what its GPUs are, and a tile
// per GPU (free / held by which task of which app / unhealthy and why, with
// utilisation and memory when the node publishes them). Data: GET /v1/nodes.

(function (ui) {
  "use strict";

  const { get } = ui.api;
  const { h, plural, replace, shortUuid, time } = ui.dom;

  const POLL_MS = 30000;     // agents appear with offers, which send no event

  function create(main) {
    const summary = h("p", { id: "nodes-summary", class: "summary" }, "Loading…");
    const filter = h("input", { id: "nodes-filter", type: "search", placeholder: "host, model, driver, feature",
      "aria-describedby": "nodes-summary", oninput: () => draw() });
    const grid = h("div", { id: "nodes", class: "nodes" });
    replace(main,
      h("div", { class: "heading" }, h("h1", {}, "Nodes"),
        h("label", { class: "filter" }, h("span", {}, "Filter"), filter)),
      summary, grid);
    let data = null;

    function draw() {
      if (!data) return;
      const needle = filter.value.trim().toLowerCase();
      const shown = data.nodes.filter((node) => !needle || searchText(node).includes(needle));
      const all = data.nodes.flatMap((node) => node.gpus);
      const count = (state) => all.filter((gpu) => gpu.state === state).length;
      const unhealthy = all.filter(sick).length;
      summary.textContent = `${plural(data.nodes.length, "node")} · ${plural(all.length, "GPU")}: ` +
        `${count("held")} held, ${count("free")} free, ${unhealthy} unhealthy` +
        (needle ? ` · showing ${shown.length}` : "");
      if (!data.nodes.length) {
        replace(grid, h("p", { class: "empty" }, "No agent has been seen yet. Agents appear when ",
          "the Mesos master offers their resources to this framework (at its start, when work ",
          "waits, and at least once a minute)."));
        return;
      }
      replace(grid, shown.map(nodeCard));
    }

    return {
      async refresh() {
        data = await get("v1/nodes");
        draw();
      },
      relevant: () => true,
      pollMs: POLL_MS,
    };
  }

  function searchText(node) {
    return [node.hostname, node.id, node.gpuType, node.gpuModel, node.nvidiaDriver, node.cudaDriver,
      ...node.gpuTypes, ...node.platformFeatures, ...node.gpus.map((g) => `${g.uuid || ""} ${g.appId || ""}`)]
      .join(" ").toLowerCase();
  }

  function nodeCard(node) {
    const title = `node-${node.id}`;
    const facts = [
      ["GPU", node.gpuModel || node.gpuType || "none reported"],
      node.gpuTypes.length > 1 ? ["Models", node.gpuTypes.join(", ")] : null,
      node.gpuMemoryMb ? ["Memory", `${(node.gpuMemoryMb / 1024).toFixed(1)} GiB per GPU`] : null,
      node.computeCapability ? ["Compute", node.computeCapability] : null,
      ["Driver", node.nvidiaDriver || "—"],
      ["CUDA", node.cudaDriver || "—"],
      node.region ? ["Zone", `${node.region} / ${node.zone}`] : null,
    ].filter(Boolean);
    const stateText = { active: "active", lost: "lost", "tasks-only": "known from its tasks" }[node.state] || node.state;
    return h("section", { class: `node state-${node.state}`, "aria-labelledby": title,
      dataset: { hostname: node.hostname, agent: node.id } },
      h("header", {},
        h("h2", { id: title }, node.hostname || node.id),
        h("span", { class: `badge ${node.state}` }, stateText),
        h("span", { class: "counts" }, `${node.gpusFree}/${node.gpuCount} free`)),
      h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      node.healthError
        ? h("p", { class: "health-error error-text", role: "note" },
          "GPU health not read", node.healthReportedAt ? [" since ", time(node.healthReportedAt)] : null,
          `: ${node.healthError}. The last report stands.`)
        : null,
      node.platformFeatures.length
        ? h("ul", { class: "features", "aria-label": "Platform features" },
          node.platformFeatures.map((f) => h("li", {}, f)))
        : null,
      node.gpus.length
        ? h("ol", { class: "gpus", "aria-label": `GPUs of ${node.hostname}` }, node.gpus.map(tile))
        : h("p", { class: "muted" }, "No GPUs offered."),
      h("footer", { class: "muted" },
        "Last offer ", time(node.lastOfferAt),
        node.lostAt ? [" · lost ", time(node.lostAt)] : null,
        " · agent ", h("code", {}, node.id)));
  }

  function tile(gpu, index) {
    const state = sick(gpu) && gpu.state !== "held" ? "unhealthy" : gpu.state;
    const label = [];
    const body = [];
    body.push(h("span", { class: "gpu-id", title: gpu.uuid || "" },
      gpu.uuid ? shortUuid(gpu.uuid) : `GPU ${index + 1}`));
    if (gpu.profile) {
      // a MIG device (a GPU instance of its own): its profile
      label.push(`MIG ${gpu.profile}`);
      body.push(h("span", { class: "profile" }, `MIG ${gpu.profile}`));
    }
    if (gpu.state === "held") {
      label.push(`held by task ${gpu.taskId} of app ${gpu.appId} (${gpu.taskState})`);
      body.push(h("a", { class: "app", href: `#/apps${gpu.appId}`, dataset: { key: `tile-${gpu.taskId}-${index}` } }, gpu.appId));
      body.push(h("span", { class: "task", title: gpu.taskId }, taskShort(gpu.taskId)));
      body.push(h("span", { class: "task-state" }, stateWord(gpu.taskState)));
      if (!gpu.uuid) body.push(h("span", { class: "note" }, "UUID not reported yet"));
    } else if (gpu.state === "shared") {
      // a shared GPU: each tenant with its share (isolator/sharing)
      const tenants = gpu.tenants || [];
      label.push(`shared by ${tenants.map((t) => `task ${t.taskId} (${t.share})`).join(", ")}`);
      body.push(h("span", { class: "state-word" }, `shared · ${tenants.length}`));
      for (const t of tenants) {
        body.push(h("span", { class: "tenant", dataset: { task: t.taskId } },
          h("a", { class: "app", href: `#/apps${t.appId}` }, t.appId),
          ` ${t.share} `, h("span", { class: "task", title: t.taskId }, taskShort(t.taskId))));
      }
    } else if (state === "unhealthy") {
      // "probing": the daemon's self-check runs before it gives the GPU again
      const word = gpu.health === "probing" ? "probing" : "unhealthy";
      label.push(`${word}${gpu.reason ? `: ${gpu.reason}` : ""}`);
      body.push(h("span", { class: "state-word" }, word));
    } else {
      label.push("free");
      body.push(h("span", { class: "state-word" }, "free"));
      if (!gpu.uuid) body.push(h("span", { class: "note" }, "UUID not known yet"));
    }
    if (gpu.reason) body.push(h("span", { class: "reason" }, gpu.reason));
    if (sick(gpu) && gpu.state === "held") {
      label.push(gpu.health);
      body.push(h("span", { class: "note" }, gpu.health));
    }
    if (typeof gpu.utilization === "number") {
      label.push(`${Math.round(gpu.utilization)}% busy`);
      const bar = h("span", { class: "fill" });
      bar.style.width = `${Math.max(0, Math.min(100, gpu.utilization))}%`;
      body.push(h("span", { class: "util", title: `utilisation ${Math.round(gpu.utilization)}%` }, bar,
        h("span", { class: "util-text" }, `${Math.round(gpu.utilization)}%`)));
    }
    if (gpu.memory && typeof gpu.memory.usedMb === "number") {
      const total = typeof gpu.memory.totalMb === "number" ? ` / ${gib(gpu.memory.totalMb)}` : "";
      label.push(`memory ${gib(gpu.memory.usedMb)}${total}`);
      body.push(h("span", { class: "mem" }, `${gib(gpu.memory.usedMb)}${total}`));
    }
    return h("li", { class: `tile ${state}`, title: `${gpu.uuid || "UUID unknown"}: ${label.join(", ")}`,
      dataset: { uuid: gpu.uuid || "", state, task: gpu.taskId || "", app: gpu.appId || "" } },
      body);
  }

  // Not healthy as its node's daemon says (unhealthy, or probing: not given meanwhile).
  function sick(gpu) {
    return Boolean(gpu.health) && gpu.health !== "healthy";
  }

  function taskShort(taskId) {
    const dot = taskId.lastIndexOf(".");
    return dot > 0 && taskId.length - dot > 8 ? `…${taskId.slice(dot + 1, dot + 9)}` : taskId;
  }

  function stateWord(state) {
    return (state || "").replace(/^TASK_/, "").toLowerCase();
  }

  function gib(mb) {
    return mb >= 1024 ? `${(mb / 1024).toFixed(1)} GiB` : `${Math.round(mb)} MiB`;
  }

  ui.nodes = { POLL_MS, create, taskShort, stateWord };
})(window.MesosGpu = window.MesosGpu || {});
