"""Stand-in for the `mesos-fetcher` program, which the PyPI bundle lacks.

The agent's real fetcher (FetcherProcess, in the bundle: it decides per URI
whether to bypass the cache, download into it or take from it, keeps the cache's
books, and fails the container launch when this program exits non-zero) runs
`<launcher_dir>/mesos-fetcher` with a FetcherInfo (mesos/fetcher/fetcher.proto)
as JSON in MESOS_FETCHER_INFO, its stdout and stderr going to the sandbox's
files. This program does what Mesos 1.11's src/launcher/fetcher.cpp does with
it, with the standard library only:

- local paths (`file://`, or no scheme; relative ones under `frameworks_home`)
  are copied; http, https, ftp and ftps are downloaded (HTTP 200 required),
  stalling at most `stall_timeout`; other schemes would need a Hadoop client;
- BYPASS_CACHE downloads into the sandbox, DOWNLOAD_AND_CACHE into the cache
  directory (`cache_filename`) then from there, RETRIEVE_FROM_CACHE only from there;
- into the sandbox as `output_file` (subdirectories made) or the URI's basename;
- `executable`: mode 0755; else `extract`: .tar, .tgz, .tar.gz, .tbz2, .tar.bz2,
  .txz, .tar.xz and .zip are unpacked into the sandbox, .gz is gunzipped there
  (anything else is left as it is);
- as `user` when given (the cache directory made and given to it first).

Exit status 0 when every URI was fetched, else 1 after "Failed to fetch
'<uri>': <why>" on stderr.
"""
import gzip
import json
import os
import pwd
import shutil
import stat
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

ARCHIVES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz", ".zip")
NET_SCHEMES = ("http://", "https://", "ftp://", "ftps://")
EXECUTABLE_MODE = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
CHUNK = 1 << 16


class FetchError(Exception):
    pass


def log(message: str) -> None:
    sys.stderr.write(f"I{time.strftime('%m%d %H:%M:%S')} mesos-fetcher] {message}\n")
    sys.stderr.flush()


def basename(uri: str) -> str:
    path = urllib.parse.urlsplit(uri).path if "://" in uri else uri
    name = os.path.basename(path.rstrip("/"))
    if not name:
        raise FetchError(f"no file name in '{uri}'")
    return name


def local_path(uri: str, frameworks_home: str):
    """The local file a URI names, or None when it is not local."""
    if uri.startswith("file://"):
        return urllib.parse.unquote(uri[len("file://"):])
    if "://" in uri:
        return None
    if os.path.isabs(uri):
        return uri
    if not frameworks_home:
        raise FetchError("A relative path was passed for the resource but the Mesos framework "
                         "home was not specified. Please either provide this config option or "
                         "avoid using a relative path")
    return os.path.join(frameworks_home, uri)


def download(uri: str, destination: str, frameworks_home: str, stall_timeout) -> None:
    uri = uri.lstrip()
    log(f"Fetching URI '{uri}'")
    source = local_path(uri, frameworks_home)
    if source is not None:
        try:
            shutil.copyfile(source, destination)
        except OSError as e:
            raise FetchError(f"Failed to copy '{source}' to '{destination}': {e.strerror}")
        return
    if not uri.startswith(NET_SCHEMES):
        raise FetchError(f"Failed to create HDFS client: no Hadoop client on this agent for "
                         f"'{uri.split('://')[0]}://' URIs")
    log(f"Downloading resource from '{uri}' to '{destination}'")
    try:
        with urllib.request.urlopen(uri, timeout=stall_timeout or 60) as response, \
                open(destination, "wb") as out:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
            code = response.status if uri.startswith(("http://", "https://")) else 200
    except urllib.error.HTTPError as e:
        raise FetchError(f"Error downloading resource, received HTTP return code {e.code}")
    except (urllib.error.URLError, OSError) as e:
        raise FetchError(f"Error downloading resource: {getattr(e, 'reason', None) or e}")
    if code != 200:
        raise FetchError(f"Error downloading resource, received HTTP return code {code}")


def extract(path: str, directory: str) -> bool:
    """Unpack an archive into `directory`; False when `path` is not one."""
    try:
        if path.endswith(ARCHIVES[:-1]):
            with tarfile.open(path) as archive:
                # as Mesos's `tar -C <dir> -xf`: members stay in the directory, but
                # symbolic links are kept as they are (absolute ones too)
                archive.extractall(directory, filter="tar")
        elif path.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for member in archive.infolist():
                    written = archive.extract(member, directory)
                    mode = member.external_attr >> 16
                    if mode & 0o777 and not member.is_dir():
                        os.chmod(written, mode & 0o777)
        elif path.endswith(".gz"):
            target = os.path.join(directory, os.path.basename(path[:-3]))
            with gzip.open(path, "rb") as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, CHUNK)
        else:
            return False
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise FetchError(f"Failed to extract archive '{path}' to '{directory}': {e}")
    log(f"Extracted '{path}' into '{directory}'")
    return True


def output_path(uri: dict, sandbox: str) -> str:
    name = uri.get("output_file") or basename(uri["value"])
    path = os.path.join(sandbox, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def fetch(item: dict, info: dict) -> str:
    uri = item["uri"]
    sandbox = info["sandbox_directory"]
    home = info.get("frameworks_home", "")
    stall = (info.get("stall_timeout") or {}).get("nanoseconds")
    stall = int(stall) / 1e9 if stall else None
    action = item.get("action", "BYPASS_CACHE")
    destination = output_path(uri, sandbox)
    if action == "BYPASS_CACHE":
        download(uri["value"], destination, home, stall)
        if uri.get("executable"):
            os.chmod(destination, EXECUTABLE_MODE)
        elif uri.get("extract", True) and not extract(destination, sandbox):
            log(f"Copying instead of extracting resource from URI with 'extract' flag, because "
                f"it does not seem to be an archive: {uri['value']}")
        return destination
    cache = info.get("cache_directory")
    if not cache or not item.get("cache_filename"):
        raise FetchError("Cache directory not specified" if not cache else
                         f"No cache file name for: {uri['value']}")
    cached = os.path.join(cache, item["cache_filename"])
    if action == "DOWNLOAD_AND_CACHE":
        log("Downloading into cache")
        download(uri["value"], cached, home, stall)
    log("Fetching from cache")
    if uri.get("executable"):
        shutil.copyfile(cached, destination)
        os.chmod(destination, EXECUTABLE_MODE)
        return destination
    if uri.get("extract", True) and extract(cached, sandbox):
        return sandbox
    shutil.copyfile(cached, destination)
    return destination


def become(user: str, cache: str, uses_cache: bool) -> None:
    entry = pwd.getpwnam(user)
    if uses_cache and cache:
        os.makedirs(cache, exist_ok=True)
        os.chown(cache, entry.pw_uid, entry.pw_gid)
    os.initgroups(user, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def main() -> int:
    raw = os.environ.get("MESOS_FETCHER_INFO")
    if not raw:
        log("Missing MESOS_FETCHER_INFO environment variable")
        return 1
    info = json.loads(raw)
    log(f"Fetcher Info: {raw}")
    items = info.get("items", [])
    uses_cache = any(i.get("action", "BYPASS_CACHE") != "BYPASS_CACHE" for i in items)
    try:
        if uses_cache and info.get("cache_directory"):
            os.makedirs(info["cache_directory"], exist_ok=True)
        if info.get("user"):
            become(info["user"], info.get("cache_directory", ""), uses_cache)
    except (OSError, KeyError) as e:
        log(f"Fetcher could not execute `os::su()` for user '{info.get('user')}': {e}")
        return 1
    for item in items:
        try:
            fetched = fetch(item, info)
        except (FetchError, OSError) as e:
            log(f"Failed to fetch '{item['uri']['value']}': {e}")
            return 1
        log(f"Fetched '{item['uri']['value']}' to '{fetched}'")
    log(f"Successfully fetched all URIs into '{info['sandbox_directory']}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
