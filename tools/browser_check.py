"""JupyterLab's own browser check (``python -m jupyterlab.browser_check``) with Debian's Chromium.

jupyterlab.browser_check starts JupyterLab with every installed extension, loads it in a headless
browser, and exits 1 on a JavaScript error or an error the server logged. Its browser step runs
``npx playwright install``, which downloads a browser; this runs the same steps (browser-test.js,
ported) through Playwright for Python on ``/usr/bin/chromium`` instead. Run with the Python of the
environment under test: ``<venv>/bin/python tools/browser_check.py``.
"""

from __future__ import annotations

import json
import os

import jupyterlab.browser_check as browser_check
from playwright.async_api import async_playwright

CHROMIUM = os.environ.get("NBMEMORY_CHROMIUM", "/usr/bin/chromium")
# As in tests/server/test_ui.py: Chromium as root in a container, no GPU.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


async def run_browser(url: str) -> None:
    """What jupyterlab/browser-test.js does: wait for the app to start, fail on any error it shows."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(url)
        await page.locator("#jupyter-config-data").wait_for(state="attached")
        await page.wait_for_selector("#main", timeout=100_000)
        marker = await page.wait_for_selector("#browserTest", timeout=100_000, state="attached")
        await page.wait_for_selector(".completed", state="attached", timeout=100_000)
        errors += [
            str(error.get("message", error)) for error in json.loads(await marker.text_content() or "[]")
        ]
        await browser.close()
    if errors:
        raise RuntimeError(f"JupyterLab reported errors in the browser: {errors}")
    print("Browser test complete: JupyterLab started with no errors")


class BrowserApp(browser_check.BrowserApp):
    # As under `python -m jupyterlab.browser_check`: the server loads the extension app from the
    # module it was started as, here this script.
    name = __name__


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    return [{"module": __name__, "app": BrowserApp}]


if __name__ == "__main__":
    # BrowserApp.initialize_handlers looks run_browser up in jupyterlab.browser_check.
    browser_check.run_browser = run_browser  # type: ignore[assignment]
    BrowserApp.launch_instance()
