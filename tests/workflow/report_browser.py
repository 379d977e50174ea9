"""Open a `snakemake --report` HTML file in headless Chromium (selenium + chromedriver) and
find the scaling report's results table and its curves image, as a reader would click.

`browser_or_skip()`: skips the calling test when chromium, chromedriver or selenium is
missing, unless SCALERL_REQUIRE_BROWSER=1 (.ci/run, after .ci/browser_up.sh): then it fails.
"""

import os
import shutil

import pytest


def browser_or_skip() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
        missing = [] if chromium and driver else ["chromium/chromedriver (.ci/browser_up.sh)"]
    except ImportError:
        missing = ["selenium (pip install -e .[dev])"]
    if missing:
        msg = f"no headless browser: missing {', '.join(missing)}"
        if os.environ.get("SCALERL_REQUIRE_BROWSER") == "1":
            pytest.fail(msg + " but SCALERL_REQUIRE_BROWSER=1")
        pytest.skip(msg)
    return chromium, driver


def check_report(html_path, category="Scaling report", image="curves.png", timeout_s=60):
    """The category's results table lists `image`; its view button shows it (decoded, > 300 px)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, driver_path = browser_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(f"file://{os.path.abspath(html_path)}")
        wait = WebDriverWait(driver, timeout_s)
        wait.until(lambda d: d.find_elements(
            By.XPATH, f"//*[normalize-space(text())='{category}']"))[0].click()
        table = wait.until(lambda d: d.find_elements(By.TAG_NAME, "table"))[0]
        for name in ("scaling.md", "scaling.parquet", image):
            assert name in table.text, table.text
        row = wait.until(lambda d: d.find_elements(By.XPATH, f"//tr[contains(., '{image}')]"))[0]
        row.find_elements(By.XPATH, ".//button|.//a")[0].click()
        widths = wait.until(lambda d: [w for w in (
            d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i)
            for i in d.find_elements(By.TAG_NAME, "img")) if w and w > 300])
        return widths
    finally:
        driver.quit()
