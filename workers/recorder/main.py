"""The recorder process: the shell around core.py's decisions that fills the call store from the record
directory, keeps retention, and finishes or removes part files left behind by killed workers.

Owns the call store's writer side (voicecore.store: ``CallStore.open(database_url_for(config))``), the
record directory's housekeeping, and reporting:
  PUSH gateway.sock -> heartbeat every 150 ms and stats every second, as process "recorder"
  PULL recorder.sock <- the model worker's live events (observe.events)
  PUB  observe.sock  -> the console: the same events, numbered and stored (observed.events)
  NATS fanout_url    -> every node's console: the same batches on the fleet subject (voicecore/observe/fleet.py),
                        when fanout_url is set (a thread of its own: publishing never blocks this loop)
Live events are numbered per call (voicecore/observe/numbering.py), stored in the ``events`` table in one
transaction per batch, and only then published: whatever an observer was sent is already in the store, so
a late joiner replays from the store and continues live without a gap. Without a store they are numbered
and published all the same. A finished record whose call has no stored events (the recorder was down
the whole call) gets them derived from the record (voicecore/observe/events.py's walk, the same as live).
It ingests each finished record (``*.jsonl``, never a ``.part``) it has not handled yet, once: those the
model worker names as it finishes them (``record.finished``, at once, with the summary it built as the call
went, so the file is not read), and what a listing of the record directory finds (at start and every
SCAN_EVERY_S: records whose notice was lost, read from their file); the store's ingest is idempotent on the file
name, so after a restart it simply offers everything again. A call that wrote no record (``record_calls`` false, or a
database_url without a record_dir) comes as its summary in the store spool (voicecore/store/spool.py: a file
in the runtime directory, named in a ``call.spooled`` message): stored, then the file removed; the spool's
listing at start and every SCAN_EVERY_S finds what a recorder that was down or killed did not store (and
removes the scratch files of writers killed before their rename), and the ingest is idempotent on the spool
file's name. A record that cannot be read is logged once
(file name and problem, never its content: records are personal data) and left alone for the rest of the
run. A store that fails (PostgreSQL down or restarting) loses nothing: it is logged once per outage and reopened
(after 0.5 s, then less and less often, 5 s apart at most); records and spooled calls wait in their files and queues,
and live events (published all the same) are kept in memory, bounded (core.UnstoredEvents), and stored, in order
and before any record is ingested, once it is back; the store keeps an event once by its number.
At start, part files untouched for a day are finished into a record (their complete lines) or removed if
nothing in them can be read. With ``retention_days`` > 0, at start and then hourly, the store's calls and
the record files older than that are deleted.

Its own process, off the 20 ms path: it shares no memory with the pacer, and its file and database I/O
is blocking on purpose. Ingesting is sliced (``SLICE_S``) so a backlog never delays a heartbeat long
enough for the gateway to call the recorder dead. Without a store (no record_dir, no database_url) it
idles: heartbeats and nothing else.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

import zmq

from voicecore import timing
from voicecore.bus import messages
from voicecore.bus.transport import GATEWAY_INBOX, OBSERVE_FEED, RECORDER_INBOX, Bus, default_runtime_dir, ensure_runtime_dir
from voicecore.call.record import encode_line
from voicecore.config import Config, load_config
from voicecore.logs import run_until_signalled, setup_logging
from voicecore.observe.events import events_of_record
from voicecore.observe.numbering import EventNumbering, Row, rows_chunks
from voicecore.observe.transport import FleetPublisher
from voicecore.record import RecordError, load_record, record_name
from voicecore.store import CallStore, CallSummary, database_url_for, summarize_record
from voicecore.store import spool as store_spool
from voicecore.store.summary import summary_from_json
from voicecore.store import webhook as call_webhook
from voicecore.store.traces import TurnTracer
from workers.recorder import core
from workers.recorder.webhook import WebhookSender

log = logging.getLogger("voicecore.recorder")

PROCESS = "recorder"
SCAN_EVERY_S = 60.0  # the record directory's listing: a safety net; the model worker names each record it finishes
STATS_EVERY_S = 1.0
SLICE_S = 0.1  # longest stretch of ingesting between two heartbeats (the gateway's dead-after is 450 ms)
EVENTS_PER_TRANSACTION = 1000  # live events kept through a store outage go back in batches this size
HEARTBEAT_S = timing.IDLE_HEARTBEAT_MS / 1000  # no calls of its own: /healthz needs no more
EVENT_MESSAGES_PER_PASS = 2000
EVENTS_EVERY_S = 0.1  # live events are taken in passes this far apart: one store transaction per pass


class Recorder:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.url = database_url_for(config)
        self.record_dir = Path(config.record_dir) if config.record_dir else None
        self.runtime_dir = ensure_runtime_dir(config.runtime_dir or default_runtime_dir())
        self.bus = Bus(self.runtime_dir)
        self.gateway = self.bus.connect(zmq.PUSH, GATEWAY_INBOX)
        self.events_in = self.bus.bind(zmq.PULL, RECORDER_INBOX)
        self.events_out = self.bus.bind(zmq.PUB, OBSERVE_FEED)
        self.numbering = EventNumbering(self.last_seq)
        self.store: CallStore | None = None
        self.outage = core.StoreOutage()  # when to reopen a store that failed; its first failure is the one logged
        self.unstored = core.UnstoredEvents()  # live events numbered and published, not in the store yet
        self.purge = core.PurgeSchedule(config.retention_days)
        self.minute = core.MinuteCount()
        self.done: set[str] = set()  # record names ingested, found already stored, or unreadable: never read again
        self.backlog: list[core.RecordEntry] = []
        # the store spool (voicecore/store/spool.py): summaries of calls that wrote no record, until stored
        self.spool_dir = store_spool.spool_dir(self.runtime_dir)
        self.spooled: list[str] = []
        self.spooled_summaries: dict[str, CallSummary] = {}  # spool name -> the summary its message carried
        self.spool_bad: set[str] = set()  # unreadable or not removable: left alone for the rest of the run
        self.derived = core.DerivedEvents()  # live events that repeat derived ones are dropped
        self.stopping = False
        self.heartbeat_seq = 0
        self.counters = {name: 0 for name in (
            "calls_ingested", "records_already_stored", "records_unreadable", "parts_finished", "parts_removed",
            "records_deleted", "calls_purged", "store_errors", "events_stored", "events_published",
            "events_not_stored", "events_kept_for_the_store", "events_stored_late", "store_outages", "events_derived", "summaries_received", "summaries_malformed",
            "spooled_calls_stored", "spooled_unreadable", "events_derived_already",
            "spool_parts_finished", "spool_scratch_removed")}
        self.summaries: dict = {}  # record name -> the CallSummary its model worker sent, until it is stored
        self.events_ms_total = 0.0  # numbering, storing and publishing live events
        self.ingest_ms_max = 0.0
        # the end-of-call webhook: a summary of each call once it is stored (its own thread: never blocks ingest)
        self.webhook = (WebhookSender(config.call_webhook_url, config.call_webhook_secret)
                        if config.call_webhook_url and self.url else None)
        self.ingest_ms_total = 0.0  # reading, summarizing and storing the records ingested
        # an OpenTelemetry span per turn of each stored call, when opentelemetry-sdk is installed and configured
        self.tracer = TurnTracer.from_environment() if self.url else None
        # fanout_url: the same batches to every node's console too (NATS; voicecore/observe/transport.py)
        self.fleet = FleetPublisher(config.fanout_url, config.node) if config.fanout_url else None

    # --- the record directory -------------------------------------------------------------------------
    def listing(self) -> list[core.RecordEntry]:
        if self.record_dir is None:
            return []
        entries = []
        try:
            with os.scandir(self.record_dir) as it:
                for entry in it:
                    if core.is_record(entry.name) or core.is_part(entry.name):
                        try:
                            entries.append(core.RecordEntry(entry.name, entry.stat().st_mtime))
                        except FileNotFoundError:
                            continue  # renamed or deleted between the listing and the stat
        except FileNotFoundError:
            return []  # not created yet: the stack creates it, a first call's writer too
        return entries

    def clean_stale_parts(self) -> None:
        assert self.record_dir is not None
        for entry in core.stale_parts(self.listing(), time.time()):
            part = self.record_dir / entry.name
            try:
                header, entries, _complete = load_record(part)
            except (RecordError, OSError) as exc:
                try:
                    part.unlink()
                except FileNotFoundError:
                    pass
                except OSError as unlink_exc:
                    log.warning("stale part file %s: unreadable (%s) and cannot be removed: %s", entry.name, exc, unlink_exc)
                    continue
                self.counters["parts_removed"] += 1
                log.info("stale part file %s removed: unreadable (%s)", entry.name, exc)
                continue
            try:
                final = self.finish_part(part, header, entries, entry.mtime_s)
            except OSError as exc:  # the part stays: it is still the record, under a name that says so
                log.warning("stale part file %s cannot be finished: %s", entry.name, exc)
                continue
            self.counters["parts_finished"] += 1
            log.info("stale part file %s finished as %s (%d entries)", entry.name, final.name, len(entries))

    def finish_part(self, part: Path, header: dict, entries: list[dict], mtime_s: float) -> Path:
        """Write the part's complete lines as a record under the first free name from the part's own
        (voicecore/record.py's rule: never replace a record), with the part's mtime (when the call last
        wrote: retention counts from then), and remove the part."""
        own_name = core.record_name_of_part(part.name)
        call_sid = str(header.get("call_sid", ""))
        stem = own_name.removesuffix(core.RECORD_SUFFIX)
        if call_sid and stem == call_sid:
            names = [record_name(call_sid, n) for n in range(1, 1000)]
        elif call_sid and stem.startswith(call_sid + "-") and stem[len(call_sid) + 1:].isdigit():
            names = [record_name(call_sid, n) for n in range(int(stem[len(call_sid) + 1:]), 1000)]
        else:
            names = [own_name]  # not a name our writer gave: keep it, without numbering
        text = "".join(encode_line(line) + "\n" for line in [header, *entries]).encode("utf-8")
        fd, tmp_name = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=part.parent)  # mode 0600
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            os.utime(tmp, (mtime_s, mtime_s))
            for name in names:
                final = part.parent / name
                try:
                    os.link(tmp, final)  # atomic, and fails if the name is taken
                except FileExistsError:
                    continue
                part.unlink(missing_ok=True)
                return final
            raise FileExistsError(f"no free record name in {part.parent}")
        finally:
            tmp.unlink(missing_ok=True)

    # --- the store ------------------------------------------------------------------------------------
    def open_store(self) -> CallStore | None:
        if self.store is not None:
            return self.store
        now = time.monotonic()
        if not self.outage.may_try(now):
            return None
        try:
            self.store = CallStore.open(self.url)
        except Exception as exc:  # the database's own errors vary by driver; the recorder outlives them
            self.store_failed(exc, opening=True)
            return None
        down_s = self.outage.recovered(time.monotonic())
        if down_s is None:
            log.info("call store open")
        else:
            log.info("call store open again after %.1f s; storing what waited: %d live events, %d records, %d spooled calls",
                     down_s, len(self.unstored), len(self.backlog), len(self.spooled))
        return self.store

    def store_failed(self, exc: Exception, opening: bool = False) -> None:
        """The store failed: closed, and reopened after a while (sooner at first). Only the first failure of
        an outage is logged: records, spooled calls and live events wait for the store and lose nothing."""
        self.counters["store_errors"] += 1
        if self.outage.failed(time.monotonic()):
            self.counters["store_outages"] += 1
            log.warning("call store %s (%s: %s); records, spooled calls and live events are kept and stored when "
                        "it is back (retrying every %.0f s at most)", "cannot be opened" if opening else "failed",
                        type(exc).__name__, str(exc).strip(), self.outage.max_s, extra={"problem": "store"})
        else:
            log.debug("call store still failing (%s); next try in %.1f s", type(exc).__name__, self.outage.retry_s)
        try:
            if self.store is not None:
                self.store.close()
        except Exception:  # noqa: BLE001 (closing a broken connection may fail in its own way)
            pass
        self.store = None

    def ingest(self, entry: core.RecordEntry) -> bool:
        """Store one record: from the summary the model worker sent with it, else read once from its file.
        False: the store failed (the record stays in the backlog)."""
        assert self.record_dir is not None
        store = self.open_store()
        if store is None:
            return False
        started = time.perf_counter()
        summary = self.summaries.pop(entry.name, None)
        record: tuple[dict, list[dict], bool] | None = None
        if summary is None:
            try:
                record = load_record(self.record_dir / entry.name)
                header, entries, complete = record
                summary = summarize_record(header, entries, source=entry.name, wall_end_s=entry.mtime_s, complete=complete)
            except FileNotFoundError:
                self.done.add(entry.name)  # deleted since the listing (retention, an operator): nothing to do
                return True
            except Exception as exc:  # RecordError, OSError, or content the summary chokes on: this file's problem
                self.done.add(entry.name)
                self.counters["records_unreadable"] += 1
                self.minute.add("unreadable")
                log.warning("record %s skipped: cannot be read (%s: %s)", entry.name, type(exc).__name__, exc)
                return True
        else:
            self.counters["summaries_received"] += 1
        try:
            stored = store.ingest(summary)
            # no live events (the recorder was down all along): derived from the record; also when a store that
            # failed between the ingest and the derivation is back (the ingest then says "stored before")
            if not store.last_seq(summary.call_sid):
                self.derive_events(store, entry, record)
        except Exception as exc:  # noqa: BLE001 (driver errors: the store's problem, not the file's)
            if record is None:
                self.summaries[entry.name] = summary  # kept for the retry: the file need not be read then
            self.store_failed(exc)
            return False
        self.done.add(entry.name)
        self.stored(store, summary, stored, started)
        return True

    def stored(self, store: CallStore, summary: CallSummary, stored: bool, started: float) -> None:
        """A summary went to the store (``stored``) or was there already: counts, the webhook, the trace."""
        took_ms = (time.perf_counter() - started) * 1000
        self.ingest_ms_max = max(self.ingest_ms_max, took_ms)
        if stored:
            self.ingest_ms_total += took_ms
            self.counters["calls_ingested"] += 1
            if self.webhook is not None and summary.complete:
                self._send_webhook(store, summary.call_sid)
            if self.tracer is not None:
                self.tracer.export(summary)
            self.minute.add("ingested")
            log.debug("call %s stored from %s%s", summary.call_sid, summary.source, "" if summary.complete else " (incomplete)")
        else:
            self.counters["records_already_stored"] += 1

    # --- the store spool: the summaries of calls that wrote no record ----------------------------------
    def ingest_spooled(self, name: str) -> bool:
        """Store one spooled summary (from its message, else its file), then remove the file: removed only
        once stored, so a recorder killed in between stores it again at start, and the store's ingest
        (idempotent on the spool name) keeps it once. False: the store failed (it stays queued)."""
        store = self.open_store()
        if store is None:
            return False
        started = time.perf_counter()
        summary = self.spooled_summaries.pop(name, None)
        call: store_spool.SpooledCall | None = None
        if summary is None:
            try:
                call = store_spool.parse(store_spool.read(self.spool_dir, name))
                summary = call.summary
                if summary.source != name:
                    raise ValueError(f"its source is {summary.source!r}")
            except FileNotFoundError:
                return True  # stored and removed already (its message came after a restart's listing)
            except Exception as exc:  # noqa: BLE001 (OSError, or content that is not a summary: this file's problem)
                self.counters["spooled_unreadable"] += 1
                self.spool_bad.add(name)
                log.warning("spooled call %s skipped: cannot be read (%s: %s)", name, type(exc).__name__, exc)
                return True
        else:
            self.counters["summaries_received"] += 1
        try:
            stored = store.ingest(summary)
            if not store.last_seq(summary.call_sid):  # as ingest(): also on a retry after a failure in between
                self.spooled_events(store, name, call)
        except Exception as exc:  # noqa: BLE001 (driver errors: the store's problem)
            self.spooled_summaries[name] = summary
            self.store_failed(exc)
            return False
        try:
            store_spool.remove(self.spool_dir, name)
        except OSError as exc:
            self.spool_bad.add(name)  # stored; offered again after a restart, and then found stored
            log.warning("spooled call %s stored, but its file cannot be removed: %s", name, exc)
        self.stored(store, summary, stored, started)
        if stored:
            self.counters["spooled_calls_stored"] += 1
        return True

    def spooled_events(self, store: CallStore, name: str, call: store_spool.SpooledCall | None) -> None:
        """A stored call without live events (the recorder was down all along): its events from the spool file."""
        if call is None:
            try:
                call = store_spool.parse(store_spool.read(self.spool_dir, name))
            except Exception as exc:  # noqa: BLE001 (the call is stored; its events are a nice-to-have)
                log.warning("spooled call %s: events not stored: %s", name, type(exc).__name__)
                return
        sid = call.summary.call_sid
        rows = [(sid, seq, round(call.started_at + t_ms / 1000, 3), t_ms, kind, json.dumps(data, separators=(",", ":")))
                for seq, (t_ms, kind, data) in enumerate(call.events, start=1)]
        if rows:
            store.add_events(rows)
            self.counters["events_derived"] += len(rows)
            self.derived.derived(sid, (row[2] for row in rows))

    def summary_sent_with(self, name: str, summary_json: str) -> CallSummary | None:
        """The summary a model worker's message carried for the file ``name``, if it is one and of that file;
        a malformed one is counted and None (the file is read instead)."""
        if not summary_json:
            return None
        try:
            summary = summary_from_json(summary_json)
        except (ValueError, TypeError, KeyError):
            self.counters["summaries_malformed"] += 1
            return None
        return summary if summary.source == name else None

    def offer_spooled(self, name: str, summary_json: str) -> None:
        """A call the model worker spooled as it ended: queued at once (the listing at start finds the rest)."""
        if not self.url or not store_spool.is_spooled(name) or name in self.spooled or name in self.spool_bad:
            return
        summary = self.summary_sent_with(name, summary_json)
        if summary is not None:
            self.spooled_summaries[name] = summary
        self.spooled.append(name)

    def scan_spool(self) -> None:
        """The spool's files not stored yet, after finishing the part files of calls whose model worker died
        and removing the scratch files of writers killed before their rename."""
        self.remove_stale_scratch()
        for part in store_spool.stale_parts(store_spool.part_listing(self.spool_dir), time.time()):
            try:
                final = store_spool.finish_part(self.spool_dir, part)
            except OSError as exc:
                log.warning("stale spool part %s cannot be finished: %s", part, exc)
                continue
            self.counters["spool_parts_finished"] += 1
            log.info("stale spool part %s finished as %s (its model worker stopped before the call ended)", part, final)
        for name in store_spool.listing(self.spool_dir):
            if name not in self.spooled and name not in self.spool_bad:
                self.spooled.append(name)

    def remove_stale_scratch(self) -> None:
        """Scratch files (``.spool-*.tmp``) older than any write in progress: their writer was killed between
        the write and the rename, and nothing else would ever remove them (they hold what a caller said)."""
        for name in store_spool.stale_scratch(store_spool.scratch_listing(self.spool_dir), time.time()):
            try:
                store_spool.remove(self.spool_dir, name)
            except OSError as exc:
                log.warning("stale spool scratch file %s cannot be removed: %s", name, exc)
                continue
            self.counters["spool_scratch_removed"] += 1
            log.info("stale spool scratch file %s removed (its writer stopped before renaming it)", name)

    def _send_webhook(self, store: CallStore, call_sid: str) -> None:
        assert self.webhook is not None
        try:
            call = store.call(call_sid)
        except Exception as exc:  # noqa: BLE001 (the store's problem; the call is stored, its summary is not sent)
            log.warning("call %s: end-of-call webhook not built: %s", call_sid, type(exc).__name__)
            return
        if call is not None:
            self.webhook.submit(call_sid, call_webhook.call_summary(call))

    def ingest_slice(self) -> None:
        """Ingest from the spool, then the backlog, for at most SLICE_S; the rest waits for the next pass
        (heartbeats first)."""
        deadline = time.monotonic() + SLICE_S
        # Live events kept through an outage first: a call whose events are all waiting must not look eventless
        # to the ingest (which would derive them from its file instead).
        if self.unstored and not self.store_unstored(deadline):
            return
        while self.spooled and time.monotonic() < deadline and not self.stopping:
            if not self.ingest_spooled(self.spooled[0]):
                return
            self.spooled.pop(0)
        while self.backlog and time.monotonic() < deadline and not self.stopping:
            if not self.ingest(self.backlog[0]):
                return  # the store is down: keep the backlog, try again when the outage's retry is due
            self.backlog.pop(0)

    def scan(self) -> None:
        self.backlog = core.to_ingest(self.listing(), self.done)

    def apply_retention(self) -> None:
        """Delete the record files past the retention, then the store's calls (records are personal data)."""
        if self.record_dir is not None:
            for entry in core.expired_records(self.listing(), time.time(), self.config.retention_days):
                try:
                    (self.record_dir / entry.name).unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.warning("record %s past retention cannot be deleted: %s", entry.name, exc)
                    continue
                self.done.discard(entry.name)
                self.counters["records_deleted"] += 1
        store = self.open_store()
        if store is None:
            return
        try:
            purged = store.purge(self.config.retention_days)
        except Exception as exc:  # noqa: BLE001
            self.store_failed(exc)
            return
        self.counters["calls_purged"] += purged
        if purged:
            log.info("retention (%s days): %d calls purged from the store", self.config.retention_days, purged)

    # --- the live events ------------------------------------------------------------------------------
    def last_seq(self, call_sid: str) -> int:
        """Where ``call_sid``'s event count stood (a call this recorder has not seen: the store knows)."""
        store = self.open_store() if self.url else None
        if store is None:
            return 0
        try:
            return store.last_seq(call_sid)
        except Exception as exc:  # noqa: BLE001 (driver errors)
            self.store_failed(exc)
            return 0

    def take_events(self) -> int:
        """Number, store, then publish the live events waiting; how many messages were handled."""
        started = time.perf_counter()
        rows: list[Row] = []
        handled = 0
        for message in self.bus.receive_nowait(self.events_in, EVENT_MESSAGES_PER_PASS):
            handled += 1
            if isinstance(message, messages.ObserveEvents):
                numbered = self.numbering.number(message.events)
                if self.derived.until:
                    kept = [row for row in numbered if not self.derived.repeats(row[0], row[2])]
                    self.counters["events_derived_already"] += len(numbered) - len(kept)
                    numbered = kept
                rows.extend(numbered)
            elif isinstance(message, messages.RecordFinished):
                self.offer_record(message.name, message.summary)
            elif isinstance(message, messages.CallSpooled):
                self.offer_spooled(message.name, message.summary)
        if not rows:
            if self.unstored:
                self.store_unstored(time.monotonic() + SLICE_S)
            return handled
        if self.url:
            # In order: what an outage kept, then these. Published all the same when the store fails (the live
            # view must not stop): kept, and stored once the store is back.
            if self.unstored:
                self.unstored_keep(rows)
                self.store_unstored(time.monotonic() + SLICE_S)
            elif (store := self.open_store()) is None:
                self.unstored_keep(rows)
            else:
                try:
                    store.add_events(rows)
                    self.counters["events_stored"] += len(rows)
                except Exception as exc:  # noqa: BLE001 (driver errors)
                    self.store_failed(exc)
                    self.unstored_keep(rows)
        self.publish(rows)
        self.events_ms_total += (time.perf_counter() - started) * 1000
        return handled

    def unstored_keep(self, rows: list[Row]) -> None:
        self.counters["events_kept_for_the_store"] += len(rows)
        dropped = self.unstored.keep(rows)
        if dropped:
            self.counters["events_not_stored"] += dropped
            if self.unstored.dropped == dropped:  # the first overflow of this run: once, not per batch
                log.warning("call store down too long: the oldest live events kept for it are dropped (%d kept at most)",
                            self.unstored.kept, extra={"problem": "store"})

    def store_unstored(self, deadline: float) -> bool:
        """Store the live events an outage kept, oldest first, in batches until ``deadline`` (monotonic s: the
        rest in the next pass, heartbeats first); False while the store fails or events still wait."""
        while self.unstored and time.monotonic() < deadline:
            store = self.open_store()
            if store is None:
                return False
            batch = self.unstored.oldest(EVENTS_PER_TRANSACTION)
            try:
                store.add_events(batch)
            except Exception as exc:  # noqa: BLE001 (driver errors)
                self.store_failed(exc)
                return False
            self.unstored.stored(len(batch))
            self.counters["events_stored"] += len(batch)
            self.counters["events_stored_late"] += len(batch)
        return not self.unstored

    def offer_record(self, name: str, summary_json: str) -> None:
        """A record the model worker just finished, with its summary: into the backlog, no listing needed."""
        if self.record_dir is None or not self.url:
            return
        if "/" in name or not core.is_record(name) or name in self.done or any(e.name == name for e in self.backlog):
            return
        summary = self.summary_sent_with(name, summary_json)
        if summary is not None:
            self.summaries[name] = summary
        try:
            mtime_s = (self.record_dir / name).stat().st_mtime
        except OSError:
            self.summaries.pop(name, None)
            return  # gone already; a listing finds whatever is there
        self.backlog.append(core.RecordEntry(name, mtime_s))

    def publish(self, rows: list[Row]) -> None:
        for count, text in rows_chunks(rows):
            if self.bus.send(self.events_out, messages.ObservedEvents(text)):
                self.counters["events_published"] += count
            if self.fleet is not None:
                self.fleet.publish(text)  # never blocks: a bounded queue to the fan-out's own thread

    def derive_events(self, store: CallStore, entry: core.RecordEntry, record: tuple[dict, list[dict], bool] | None) -> None:
        """A stored call without live events (the recorder was down): its events from the record (the same
        walk as live), read now if it was not."""
        try:
            header, entries, complete = record if record is not None else load_record(self.record_dir / entry.name)
        except Exception as exc:  # noqa: BLE001 (the call is stored; its events are a nice-to-have)
            log.warning("record %s: events not derived: %s", entry.name, type(exc).__name__)
            return
        call_sid = str(header.get("call_sid", ""))
        if not call_sid or not entries:
            return
        duration_s = (entries[-1]["t"] - entries[0]["t"]) / 1e9
        events = events_of_record(header, entries, complete)
        rows = [(call_sid, seq, round(entry.mtime_s - duration_s + t_ms / 1000, 3), t_ms, kind, json.dumps(data, separators=(",", ":")))
                for seq, (t_ms, kind, data) in enumerate(events, start=1)]
        store.add_events(rows)
        self.counters["events_derived"] += len(rows)
        self.derived.derived(call_sid, (row[2] for row in rows))

    # --- reporting --------------------------------------------------------------------------------------
    def heartbeat(self, stats: bool) -> None:
        self.heartbeat_seq += 1
        pid = os.getpid()
        self.bus.send(self.gateway, messages.Heartbeat(PROCESS, pid, self.heartbeat_seq, time.monotonic_ns(), timing.IDLE_HEARTBEAT_MS))
        if stats:
            values = {name: float(n) for name, n in self.counters.items()}
            values["ingest_max_ms"] = self.ingest_ms_max
            values["ingest_per_call_ms"] = self.ingest_ms_total / max(1, self.counters["calls_ingested"])
            values["ingest_ms_total"] = self.ingest_ms_total
            values["events_ms_total"] = self.events_ms_total
            values["events_malformed"] = float(self.numbering.malformed)
            if self.webhook is not None:
                values.update({name: float(n) for name, n in self.webhook.counters.items()})
            if self.fleet is not None:
                values.update({name: float(n) for name, n in self.fleet.counters.items()})
            self.bus.send(self.gateway, messages.Stats(PROCESS, pid, values))

    # --- the loop ---------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.url:
            log.info("no call store (no record_dir, no database_url): idle")
            return
        if self.record_dir is not None:
            self.clean_stale_parts()
        if self.purge.due(time.monotonic()):
            self.apply_retention()
            self.purge.ran(time.monotonic())
        log.info("recorder ready")

    def run(self) -> None:
        self.start()
        next_heartbeat_s = next_stats_s = next_scan_s = next_events_s = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= next_events_s:
                self.take_events()
                next_events_s = now + EVENTS_EVERY_S
            if now >= next_heartbeat_s:
                stats = now >= next_stats_s
                self.heartbeat(stats)
                next_heartbeat_s = now + HEARTBEAT_S
                if stats:
                    next_stats_s = now + STATS_EVERY_S
            if self.url:
                if self.purge.due(now):
                    self.apply_retention()
                    self.purge.ran(time.monotonic())
                if now >= next_scan_s:
                    if not self.backlog and self.record_dir is not None:
                        self.scan()
                    if not self.spooled:
                        self.scan_spool()
                    next_scan_s = now + SCAN_EVERY_S
                if self.backlog or self.spooled or self.unstored:
                    self.ingest_slice()
                counts = self.minute.take_due(now)
                if counts:
                    log.info("last minute: %s", ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
            if (self.backlog or self.spooled or self.unstored) and self.store is not None:
                continue  # more to ingest: the next slice after the heartbeat check
            wake_s = min(next_heartbeat_s, next_events_s, next_scan_s if self.url else next_heartbeat_s)
            time.sleep(max(0.0, wake_s - time.monotonic()))

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001
                pass
            self.store = None
        if self.webhook is not None:
            self.webhook.close()
        if self.tracer is not None:
            self.tracer.shutdown()
        if self.fleet is not None:
            self.fleet.close()
        self.bus.close()
        for name in (RECORDER_INBOX, OBSERVE_FEED):
            (self.runtime_dir / name).unlink(missing_ok=True)


def main() -> None:
    config = load_config(os.environ)
    setup_logging(PROCESS, config.log_level, config.log_format)
    run_until_signalled(Recorder(config))


if __name__ == "__main__":
    main()
