"""`voicecore console-key add NAME | list | revoke NAME`: the console's API keys in the call store.

Owns the command's work (voicecore/cli.py parses its arguments). ``add`` prints the new key once, on
stdout alone (so ``KEY=$(voicecore console-key add ops)`` works); the store keeps only its SHA-256. A key is
often made before the first ``voicecore up``: ``add`` creates the record directory (0700, as ``up`` does)
when the store is the default one inside it; ``list`` and ``revoke`` create nothing.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from voicecore.config import load_config
from voicecore.store.db import CallStore, StoreError, database_url_for

NO_STORE = ("voicecore console-key: no call store configured: set VOICECORE_RECORD_DIR (the store is "
            "<record_dir>/calls.db) or VOICECORE_DATABASE_URL, as for `voicecore up`")


def run_console_key(environ: Mapping[str, str], config_path: str | None, action: str, name: str | None, as_json: bool = False,
                    out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    config = load_config(environ, config_path)
    url = database_url_for(config)
    if not url:
        print(NO_STORE, file=err)
        return 2
    if action == "add" and config.record_dir and not config.database_url:
        try:  # the store is <record_dir>/calls.db: a key made before the first `voicecore up` needs the directory
            Path(config.record_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            print(f"voicecore console-key: cannot make the record directory {config.record_dir}: {exc}", file=err)
            return 1
    if action in ("add", "revoke") and not name:
        print(f"voicecore console-key {action}: a NAME is needed", file=err)
        return 2
    try:
        store = CallStore.open(url)
    except StoreError as exc:
        print(f"voicecore console-key: {exc}", file=err)
        return 2
    except Exception as exc:  # the database's own errors: report, not trace
        print(f"voicecore console-key: cannot open the call store: {type(exc).__name__}: {exc}", file=err)
        return 1
    with store:
        if action == "add":
            assert name is not None
            try:
                key = store.add_api_key(name)
            except StoreError as exc:
                print(f"voicecore console-key add: {exc}", file=err)
                return 1
            print(key, file=out)
            print(f"API key {name!r} added; it is shown only now. Use it as 'Authorization: Bearer KEY' or on the "
                  "console's login page.", file=err)
            return 0
        if action == "revoke":
            assert name is not None
            if not store.revoke_api_key(name):
                print(f"voicecore console-key revoke: no live key named {name!r}", file=err)
                return 1
            print(f"API key {name!r} revoked", file=err)
            return 0
        keys = store.api_keys()
    if as_json:
        print(json.dumps({"keys": keys}), file=out)
    elif not keys:
        print("no API keys", file=out)
    else:
        for key in keys:
            created = datetime.datetime.fromtimestamp(key["created_at"]).astimezone().isoformat(timespec="seconds")
            state = "live" if key["revoked_at"] is None else "revoked"
            print(f"{key['name']}  {created}  {state}", file=out)
    return 0
