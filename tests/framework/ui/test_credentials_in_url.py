"""The dashboard opened with credentials in its URL (http://user:password@host/ui/),
in the real Chromium against the real framework on a real Mesos cluster: the page's
own requests carry no credentials in their URLs (fetch refuses those), so it
works, signed in with the URL's credentials; wrong ones get the sign-in form,
never "the framework cannot be reached"."""
from selenium.webdriver.common.by import By

from tests.bed.browser import Browser

REFUSED = "includes credentials"


def _css(browser, selector):
    return browser.driver.find_elements(By.CSS_SELECTOR, selector)


def _state(browser) -> dict:
    """What the page shows, read in one step (it draws regions anew)."""
    return browser.driver.execute_script(
        "const live = document.querySelector('#live'), main = document.querySelector('main');"
        "return {live: live && live.dataset.state, loaded: main && main.dataset.loaded,"
        " login: Boolean(document.querySelector('form.login')), text: document.body.innerText}")


def test_a_url_with_credentials_works_and_wrong_ones_ask_for_sign_in(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    user, password = service.auth.credentials.split(":", 1)
    where = service.http.url.split("://", 1)[1]
    with Browser() as browser:
        browser.open(f"http://{user}:{password}@{where}/ui/")
        browser.wait(lambda: _state(browser)["live"] == "live" and _state(browser)["loaded"],
                     30, "the page signed in, its data loaded and the live stream on")
        state = _state(browser)
        assert not state["login"] and "cannot be reached" not in state["text"]
        errors = browser.console_errors()
        assert not [e for e in errors if REFUSED in e["message"]], errors
        assert errors == [], errors
        # the tab keeps the credentials it was opened with, not in any URL it asks
        assert browser.driver.execute_script(
            "return sessionStorage.getItem('mesos-gpu.authorization')").startswith("Basic ")

        browser.driver.execute_script("sessionStorage.clear()")
        browser.open(f"http://{user}:wrong-password@{where}/ui/")
        browser.wait(lambda: _css(browser, "form.login"), 30, "the sign-in form")
        assert "cannot be reached" not in _state(browser)["text"]
        assert not [e for e in browser.console_errors() if REFUSED in e["message"]]
