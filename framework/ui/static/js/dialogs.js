// Asking before anything changes, and saying what happened after.
// The confirmation is a modal <dialog>: focus moves into it (onto Cancel, the
// safe choice), Tab stays inside, Escape cancels, Enter on a button chooses it.

(function (ui) {
  "use strict";

  const { byKey, h } = ui.dom;

  const dialog = () => document.getElementById("confirm");

  // Resolves to true when the user chose `action`, false otherwise. `extra`:
  // elements shown in the dialog (read them after it resolves).
  function confirmAction({ title, text, action, extra = [], danger = true }) {
    const box = dialog();
    const returnFocus = document.activeElement;
    const returnKey = returnFocus && returnFocus.dataset ? returnFocus.dataset.key : undefined;
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = text;
    document.getElementById("confirm-extra").replaceChildren(...extra);
    const ok = document.getElementById("confirm-ok");
    ok.textContent = action;
    ok.className = danger ? "danger" : "primary";
    box.returnValue = "";
    return new Promise((resolve) => {
      box.addEventListener("close", () => {
        // the page may have been drawn again meanwhile: the same control, new element
        const back = returnFocus && document.contains(returnFocus) ? returnFocus : byKey(returnKey);
        if (back) back.focus();
        resolve(box.returnValue === "ok");
      }, { once: true });
      box.showModal();
      document.getElementById("confirm-cancel").focus();
    });
  }

  let noticeTimer = null;

  // A line under the header, read out by screen readers; errors stay until the next notice.
  function notice(text, kind = "info") {
    const box = document.getElementById("notice");
    box.replaceChildren(h("span", {}, text),
      h("button", { type: "button", class: "quiet", "aria-label": "Dismiss", onclick: () => { box.hidden = true; } }, "×"));
    box.dataset.kind = kind;
    box.hidden = false;
    clearTimeout(noticeTimer);
    if (kind !== "error") noticeTimer = setTimeout(() => { box.hidden = true; }, 8000);
  }

  ui.dialogs = { confirmAction, notice };
})(window.MesosGpu = window.MesosGpu || {});
