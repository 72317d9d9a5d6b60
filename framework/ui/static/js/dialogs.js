// Asking before anything changes, and saying what happened after.
// The confirmation is a modal <dialog>: focus moves into it (onto Cancel, the
// safe choice), Tab stays inside, Escape cancels, Enter on a button chooses it.

import { h } from "./dom.js";

const dialog = () => document.getElementById("confirm");

// Resolves to true when the user chose `action`, false otherwise. `extra`:
// elements shown in the dialog (read them after it resolves).
export function confirmAction({ title, text, action, extra = [], danger = true }) {
  const box = dialog();
  const returnFocus = document.activeElement;
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-extra").replaceChildren(...extra);
  const ok = document.getElementById("confirm-ok");
  ok.textContent = action;
  ok.className = danger ? "danger" : "primary";
  box.returnValue = "";
  return new Promise((resolve) => {
    box.addEventListener("close", () => {
      if (returnFocus && document.contains(returnFocus)) returnFocus.focus();
      resolve(box.returnValue === "ok");
    }, { once: true });
    box.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

let noticeTimer = null;

// A line under the header, read out by screen readers; errors stay until the next notice.
export function notice(text, kind = "info") {
  const box = document.getElementById("notice");
  box.replaceChildren(h("span", {}, text),
    h("button", { type: "button", class: "quiet", "aria-label": "Dismiss", onclick: () => { box.hidden = true; } }, "×"));
  box.dataset.kind = kind;
  box.hidden = false;
  clearTimeout(noticeTimer);
  if (kind !== "error") noticeTimer = setTimeout(() => { box.hidden = true; }, 8000);
}
