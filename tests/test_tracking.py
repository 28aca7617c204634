"""Tracking: track ids per stream from supervision's ByteTrack.

In process with synthetic boxes, then through the real daemon: people from the bundled
photos pasted on a grey canvas and moved across 30 frames, sent as one stream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from support.configs import person_config
from support.daemons import Daemon
from support.person import photo

from edged.client import InvalidArgument
from edged.detect.tracking import Trackers

pytest.importorskip("supervision", reason="tracking needs the 'track' extra")


def box(x: float, y: float, w: float = 50, h: float = 90, score: float = 0.9) -> list[float]:
    return [x, y, x + w, y + h, score, 0]


def test_one_moving_object_keeps_one_track_id() -> None:
    t = Trackers()
    ids = set()
    for f in range(30):
        out = t.update("cam", np.array([box(10 + 8 * f, 20 + 2 * f)], np.float32))
        assert out.shape == (1, 7)
        ids.add(int(out[0, 6]))
    assert len(ids) == 1 and ids.pop() >= 0


def test_two_objects_keep_two_track_ids_and_streams_do_not_mix() -> None:
    t = Trackers()
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    for f in range(30):
        dets = np.array([box(10 + 8 * f, 20), box(400 - 8 * f, 200, score=0.8)], np.float32)
        out = t.update("cam", dets)
        other = t.update("other", dets[:1])
        assert other[0, 6] >= 0
        for k in (0, 1):
            seen[k].add(int(out[k, 6]))
    assert len(seen[0]) == 1 and len(seen[1]) == 1 and seen[0] != seen[1]


def test_trackers_are_bounded_like_the_stream_table() -> None:
    t = Trackers(max_streams=10, idle_s=60.0)
    for i in range(100):
        t.update(f"s{i}", np.array([box(10, 10)], np.float32), now=float(i))
    assert len(t) == 10
    t.update("late", np.array([box(10, 10)], np.float32), now=1000.0)
    assert len(t) == 1


def scene(frame_no: int, people: list[tuple[np.ndarray, int, int, int]]) -> np.ndarray:
    """A 640x360 grey frame with each person (image, x0, y, dx per frame) pasted in."""
    canvas = np.full((360, 640, 3), 127, np.uint8)
    for img, x0, y, dx in people:
        x = x0 + dx * frame_no
        h, w = img.shape[:2]
        canvas[y:y + h, x:x + w] = img
    return canvas


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp: Path = tmp_path_factory.mktemp("track")
    cfg = person_config(tmp)
    # The model tracks every request with a stream; a request may still say track = false.
    cfg.write_text(cfg.read_text().replace('kind = "detect"', 'kind = "detect"\ntrack = true'))
    d = Daemon(cfg, tmp)
    yield d
    d.stop()


def small(name: str) -> np.ndarray:
    frame, _ = photo(name)
    return cv2.resize(frame, (140, 160))


def test_a_person_moving_across_30_frames_keeps_one_track_id(td: Daemon) -> None:
    grace = small("grace_hopper")
    ids = []
    with td.client(timeout_s=60) as c:
        for f in range(30):
            r = c.infer("person", scene(f, [(grace, 10, 100, 15)]), stream="cam-a", track=True)
            assert r.header["detections"]["columns"][-1] == "track_id"
            d = r.detections
            assert d is not None and len(d) >= 1 and d.rows.shape[1] == 7
            ids.append(int(d.rows[0, 6]))
    assert len(set(ids)) == 1 and ids[0] >= 0, ids


def test_two_people_keep_two_track_ids(td: Daemon) -> None:
    grace, astro = small("grace_hopper"), small("astronaut")
    per_person: dict[str, set[int]] = {"left": set(), "right": set()}
    with td.client(timeout_s=60) as c:
        for f in range(30):
            frame = scene(f, [(grace, 10, 10, 7), (astro, 480, 190, -7)])
            d = c.infer("person", frame, stream="cam-b", track=True).detections
            assert d is not None
            for row in d.rows:
                if row[4] < 0.5:
                    continue
                side = "left" if (row[1] + row[3]) / 2 < 180 else "right"
                per_person[side].add(int(row[6]))
    assert len(per_person["left"]) == 1 and len(per_person["right"]) == 1, per_person
    assert per_person["left"] != per_person["right"]


def test_track_needs_a_stream_and_untracked_replies_keep_six_columns(td: Daemon) -> None:
    grace = small("grace_hopper")
    frame = scene(0, [(grace, 10, 100, 0)])
    six = ["x1", "y1", "x2", "y2", "score", "class"]
    with td.client() as c:
        with pytest.raises(InvalidArgument, match="stream"):
            c.infer("person", frame, track=True)
        with pytest.raises(InvalidArgument, match="track"):
            c.infer("person", frame, stream="cam-c", track="yes")
        model_level = c.infer("person", frame, stream="cam-c")
        opted_out = c.infer("person", frame, stream="cam-c", track=False)
        no_stream = c.infer("person", frame)
    assert model_level.header["detections"]["columns"] == [*six, "track_id"]
    assert model_level.detections.rows.shape[1] == 7
    assert opted_out.header["detections"]["columns"] == six
    assert no_stream.header["detections"]["columns"] == six
