"""The dashboard's page as one answer: index.html with its style sheet, its
scripts and its icon written into it, so a browser loads the whole dashboard
in one request and then reads its data (the page and its data are all a cold
load costs; bench/ui_page_load.py measures it against `GET /v2/apps`).

The files stay separate in the package (one concept each, plain scripts in
the order index.html lists them; they work as they are, each from its own
URL, too). Inlined, they run under a Content-Security-Policy that allows
exactly them, by their SHA-256, and nothing else inline.
"""
import base64
import hashlib
import re
from typing import Dict

from common.errors import UserError
from framework.ui.static_files import INDEX, SECURITY_HEADERS, StaticFile, StaticFiles

_SCRIPT = re.compile(r'<script src="([^"]+)"></script>')
_STYLE = re.compile(r'<link rel="stylesheet" href="([^"]+)">')
_ICON = re.compile(r'<link rel="icon" href="([^"]+)" type="([^"]+)">')


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def assemble(files: StaticFiles) -> StaticFile:
    html = files.get(INDEX).data.decode()
    scripts, styles = [], []

    def content(name: str, closing: str) -> str:
        found = files.get(name)
        if found is None:
            raise UserError(f"the dashboard's {INDEX} names {name}, which is not installed: "
                            f"reinstall mesos-gpu")
        text = found.data.decode()
        if closing in text.lower():
            raise UserError(f"the dashboard's {name} contains {closing!r}: it cannot be inlined")
        return text

    def script(match: re.Match) -> str:
        text = content(match.group(1), "</script")
        scripts.append(_digest(text))
        return f"<script>{text}</script>"

    def style(match: re.Match) -> str:
        text = content(match.group(1), "</style")
        styles.append(_digest(text))
        return f"<style>{text}</style>"

    def icon(match: re.Match) -> str:
        data = base64.b64encode(files.get(match.group(1)).data).decode()
        return f'<link rel="icon" href="data:{match.group(2)};base64,{data}">'

    html = _ICON.sub(icon, _STYLE.sub(style, _SCRIPT.sub(script, html)))
    policy = (f"{SECURITY_HEADERS['Content-Security-Policy']}; "
              f"script-src 'self' {' '.join(scripts)}; style-src 'self' {' '.join(styles)}")
    headers: Dict[str, str] = {"Content-Security-Policy": policy}
    data = html.encode()
    etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
    return StaticFile(INDEX, data, files.get(INDEX).content_type, etag, headers)
