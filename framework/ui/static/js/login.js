// Sign-in: the API's own credentials (the `user:password` of
// <state_dir>/http_credentials, or the token of --http_token_file). Nothing
// of the cluster is shown until the API accepts them.

(function (ui) {
  "use strict";

  const { basic, bearer, setAuthorization, tryAuthorization } = ui.api;
  const { h, replace } = ui.dom;

  function showLogin(main, { failed = false } = {}) {
    return new Promise((resolve) => {
      const error = h("p", { id: "login-error", class: "error", role: "alert", hidden: !failed },
        failed ? "Invalid username or password." : "");
      const user = h("input", { id: "login-user", name: "username", autocomplete: "username",
        value: "marathon", required: true });
      const password = h("input", { id: "login-password", name: "password", type: "password",
        autocomplete: "current-password" });
      const token = h("input", { id: "login-token", name: "token", type: "password", autocomplete: "off" });
      const useToken = h("input", { id: "login-use-token", type: "checkbox",
        onchange: () => { basicFields.hidden = useToken.checked; tokenField.hidden = !useToken.checked; } });
      const basicFields = h("div", {},
        h("label", { for: "login-user" }, "User"), user,
        h("label", { for: "login-password" }, "Password"), password);
      const tokenField = h("div", { hidden: true },
        h("label", { for: "login-token" }, "Token"), token);
      const submit = h("button", { type: "submit", class: "primary", id: "login-submit" }, "Sign in");
      const form = h("form", { class: "login", "aria-labelledby": "login-title", novalidate: true,
        onsubmit: async (event) => {
          event.preventDefault();
          const value = useToken.checked ? bearer(token.value) : basic(user.value, password.value);
          submit.disabled = true;
          error.hidden = true;
          try {
            if (await tryAuthorization(value)) {
              setAuthorization(value);
              resolve();
              return;
            }
            error.textContent = "Invalid username or password.";
          } catch (e) {
            error.textContent = `Cannot reach the framework: ${e.message}`;
          } finally {
            submit.disabled = false;
          }
          error.hidden = false;
          (useToken.checked ? token : password).focus();
        } },
        h("h1", { id: "login-title" }, "Sign in"),
        h("p", { class: "muted" }, "The framework's API credentials: ",
          h("code", {}, "<state_dir>/http_credentials"), " holds them as user:password."),
        basicFields, tokenField,
        h("p", { class: "check" }, useToken, h("label", { for: "login-use-token" }, "Use a bearer token instead")),
        error, submit);
      replace(main, form);
      (user.value ? password : user).focus();
    });
  }

  ui.login = { showLogin };
})(window.MesosGpu = window.MesosGpu || {});
