#!/usr/bin/env python3
"""Stream camera frames to edged and print what comes back, as a camera app would.

    python examples/streamer.py --model digits --source video.avi --duration 10
    python examples/streamer.py --model people --source 0 --show      # /dev/video0
    python examples/streamer.py --model digits --source generated --in-flight 4

Frames go as raw BGR uint8 HxWx3 (the daemon preprocesses them as the model's config
says), all under one ``stream`` id with a few in flight: while the model is busy, a newer
frame replaces an older one still waiting and the older is answered DROPPED, so the app
always gets the freshest result instead of a growing backlog. Prints detections when the
model is a detector, else each output's top values, then the achieved rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from edged.client import AsyncClient, Dropped, EdgedClientError, Reply


@dataclass
class Stats:
    sent: int = 0
    ok: int = 0
    dropped: int = 0
    failed: int = 0


class GeneratedSource:
    """A moving gradient with a square: frames without a camera, at whatever rate is asked."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height, self.n = width, height, 0

    def read(self) -> tuple[bool, np.ndarray]:
        x = np.linspace(0, 255, self.width, dtype=np.float32)
        frame = np.empty((self.height, self.width, 3), np.uint8)
        frame[..., 0] = (x[None, :] + self.n * 4) % 256
        frame[..., 1] = np.linspace(0, 255, self.height, dtype=np.uint8)[:, None]
        frame[..., 2] = 96
        s = min(self.width, self.height) // 4
        left = (self.n * 3) % max(1, self.width - s)
        cv2.rectangle(frame, (left, s), (left + s, 2 * s), (255, 255, 255), -1)
        self.n += 1
        return True, frame

    def release(self) -> None:
        pass


def open_source(spec: str, width: int, height: int) -> Any:
    """``generated``, a device index (``0`` is /dev/video0), or a file/URL OpenCV opens."""
    if spec == "generated":
        return GeneratedSource(width, height)
    cap = cv2.VideoCapture(int(spec) if spec.isdigit() else spec)
    if not cap.isOpened():
        raise SystemExit(f"streamer: cannot open video source {spec!r}")
    return cap


def describe(reply: Reply, top: int = 3) -> str:
    if reply.detections is not None:
        det = reply.detections
        boxes = ", ".join(
            f"{det.label(k)} {det.scores[k]:.2f} [{', '.join(f'{v:.0f}' for v in det.boxes[k])}]"
            for k in range(len(det)))
        return f"{len(det)} detection(s){': ' + boxes if boxes else ''}"
    parts = []
    for name, arr in reply.outputs.items():
        flat = arr.reshape(arr.shape[0], -1)[0] if arr.ndim > 1 else arr.reshape(-1)
        best = np.argsort(-flat.astype(np.float64))[:top]
        parts.append(f"{name} top " + ", ".join(f"{int(k)}: {float(flat[k]):.3g}" for k in best))
    return "; ".join(parts)


def draw(frame: np.ndarray, reply: Reply | None) -> np.ndarray:
    if reply is not None and reply.detections is not None:
        det = reply.detections
        for k in range(len(det)):
            x1, y1, x2, y2 = (int(v) for v in det.boxes[k])
            cv2.rectangle(frame, (x1, y1), (x2, y2), (0, 255, 0), 2)
            cv2.putText(frame, f"{det.label(k)} {det.scores[k]:.2f}", (x1, max(10, y1 - 4)),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 0), 1)
    return frame


async def stream(args: argparse.Namespace) -> Stats:
    source = open_source(args.source, args.width, args.height)
    stats = Stats()
    slots = asyncio.Semaphore(args.in_flight)
    latest: dict[str, Reply] = {}

    async def one(client: AsyncClient, index: int, frame: np.ndarray) -> None:
        try:
            r = await client.infer(args.model, frame, id=index, stream=args.stream)
        except Dropped:
            stats.dropped += 1
            print(f"frame {index}: dropped (a newer frame of stream {args.stream!r} replaced "
                  "it)")
        except EdgedClientError as e:
            stats.failed += 1
            print(f"frame {index}: {e}")
        else:
            stats.ok += 1
            latest["reply"] = r
            t = r.timing
            print(f"frame {index}: {describe(r)}  ({r.variant}, batch {t.get('batch')}, "
                  f"{t.get('total_us', 0) / 1000:.1f} ms in the daemon)")
        finally:
            slots.release()

    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    async with AsyncClient(args.endpoint, timeout_s=args.timeout) as client:
        while time.monotonic() - start < args.duration:
            await slots.acquire()
            ok, frame = await asyncio.to_thread(source.read)
            if not ok:
                slots.release()
                break
            if args.show:
                cv2.imshow("edged", draw(frame.copy(), latest.get("reply")))
                if cv2.waitKey(1) & 0xFF == ord("q"):
                    slots.release()
                    break
            task = asyncio.create_task(one(client, stats.sent, frame))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            stats.sent += 1
        await asyncio.gather(*tasks)
    source.release()
    elapsed = time.monotonic() - start
    print(f"sent {stats.sent} frames in {elapsed:.1f} s: {stats.ok} answered, "
          f"{stats.dropped} dropped as stale, {stats.failed} failed; "
          f"achieved {stats.ok / elapsed:.1f} fps")
    return stats


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", "-e",
                    default=os.environ.get("EDGED_ENDPOINT", "tcp://127.0.0.1:5555"))
    ap.add_argument("--model", "-m", required=True)
    ap.add_argument("--source", default="generated",
                    help="a video file, a device index (0 = /dev/video0) or 'generated'")
    ap.add_argument("--stream", default="cam0", help="stream id (freshest frame wins)")
    ap.add_argument("--in-flight", type=int, default=3, help="frames awaiting a reply at once")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds to stream")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait per frame")
    ap.add_argument("--width", type=int, default=640, help="generated frames' width")
    ap.add_argument("--height", type=int, default=480, help="generated frames' height")
    ap.add_argument("--show", action="store_true", help="show frames with boxes in a window")
    args = ap.parse_args(argv)
    if args.in_flight < 1:
        ap.error("--in-flight must be at least 1")
    if args.show and not _has_gui():
        ap.error("--show needs an OpenCV build with a GUI (opencv-python, not -headless)")
    return args


def _has_gui() -> bool:
    """opencv-python-headless reports ``GUI: NONE`` in its build information."""
    info = cv2.getBuildInformation()
    return "GUI:" in info and "NONE" not in info.split("GUI:")[1].split("\n")[0]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        stats = asyncio.run(stream(args))
    except KeyboardInterrupt:
        return 130
    if stats.sent and not stats.ok:
        print(f"streamer: no frame was answered; is the daemon running at {args.endpoint}?",
              file=sys.stderr)
    return 0 if stats.ok else 1


if __name__ == "__main__":
    sys.exit(main())
