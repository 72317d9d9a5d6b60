"""Debian's Chromium, headless, driven through Debian's chromedriver and the
`selenium` package (installed by install.sh), for the dashboard's tests.

The flags are the ones this machine needs: root (--no-sandbox), no GPU, and
no background connections (the network is closed: Chromium would try
Google's hosts at every start). Each browser gets an empty profile of its own.
"""
import shutil
import tempfile
from typing import Callable, Optional

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from tests.bed.waiting import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--disable-extensions", "--hide-scrollbars")


class Browser:
    """A started headless Chromium (`.driver` is the selenium WebDriver)."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        for path in (CHROMIUM, CHROMEDRIVER):
            if not shutil.which(path):
                raise RuntimeError(f"{path} is missing: run ./install.sh (Debian's chromium "
                                   f"and chromium-driver)")
        self.profile = tempfile.mkdtemp(prefix="mgpu-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.add_argument(f"--window-size={width},{height}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(30)

    def size(self, width: int, height: int) -> None:
        self.driver.set_window_size(width, height)

    def open(self, url: str, attempts: int = 3) -> None:
        """driver.get, again when Chromium dropped the load because the host's
        network changed (another test's container got a network interface)."""
        for attempt in range(attempts):
            try:
                self.driver.get(url)
                return
            except WebDriverException as e:
                if NETWORK_CHANGED not in str(e) or attempt == attempts - 1:
                    raise

    def console_errors(self) -> list:
        """Console errors since the last call (a failed request the page
        expects, such as a 401 before signing in, is filtered by the caller).
        A request Chromium cut because the host's network changed is not the
        page's error: the page's own retry is what the tests wait for."""
        return [e for e in self.driver.get_log("browser")
                if e["level"] == "SEVERE" and NETWORK_CHANGED not in e["message"]]

    def wait(self, predicate: Callable[[], object], timeout: float = 30.0,
             what: Optional[str] = None):
        """wait_until, where an error counts as "not yet": the page is changing under us
        (an element drawn anew is stale, one not drawn yet is missing)."""
        return wait_until(predicate, timeout, what, interval=0.1, ignore=(Exception,))

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
