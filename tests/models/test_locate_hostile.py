"""Model stores someone else filled: links that loop, point at `/`, at another repository's blobs or out of the
cache, and more entries than a listing should visit. What must hold: `attnviz models` ends, lists only what may
be read, says once on stderr what it passed over and why; and a name `models` would not list does not run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_stores import cache_repo, home_fixture, pull  # noqa: F401 (the fixture home)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_gguf import write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.models import locate as locate_module
from attnviz.models import model_location
from attnviz.models import walk as walk_module

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def listing(cli) -> tuple[dict[str, dict], str]:
    """`attnviz models --json`: the models by name, and what it said on stderr (at most one line)."""
    run = cli("models", "--json")
    assert run.code == 0, run.err
    assert run.err.count("\n") <= 1 and "Traceback" not in run.err, run.err
    return {m["model"]: m for m in json.loads(run.out)["models"] if m["source"] != "package"}, run.err


def refused(name: str, *words: str) -> str:
    with pytest.raises(AttnvizError) as err:
        model_location(name)
    message = str(err.value)
    assert "\n" not in message and all(word in message for word in words), message
    return message


# The Hugging Face cache: a snapshot's links lead to its own repository's blobs/, nowhere else.


def _hub(home: Path) -> Path:
    return home / ".cache" / "huggingface" / "hub"


def _gguf_repo(home: Path, repo: str = "org/tiny-GGUF", seed: int = 0) -> Path:
    return cache_repo(_hub(home), repo, {"tiny.gguf": write_tiny_llama(home / f"{seed}.gguf", seed=seed)})


def _loops(snapshot: Path) -> list[str]:
    """Links that go round: k to the snapshot itself, two folders linking to each other, a chain back to the
    top, a link to the repository and to the cache; each a name under which a walk that followed links would
    find tiny.gguf again and again."""
    for k in range(50):
        (snapshot / f"self{k}").symlink_to(".")
    (snapshot / "a").mkdir()
    (snapshot / "b").mkdir()
    (snapshot / "a" / "to-b").symlink_to("../b")
    (snapshot / "b" / "to-a").symlink_to("../a")
    (snapshot / "chain1").symlink_to("chain2")
    (snapshot / "chain2").symlink_to("chain3")
    (snapshot / "chain3").symlink_to(".")
    (snapshot / "repository").symlink_to("../..")
    (snapshot / "cache").symlink_to("../../..")
    (snapshot / "knot").symlink_to("knot")
    return ["self7/tiny.gguf", "a/to-b/to-a/to-b/tiny.gguf", "chain1/tiny.gguf", "repository/snapshots"]


def _outside(home: Path, snapshot: Path) -> dict[str, Path]:
    """Links that leave the repository's blobs: to `/`, to a sibling's blobs, to a folder or file outside."""
    sibling = _gguf_repo(home, "org/other-GGUF", seed=1)
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    write_tiny_llama(elsewhere / "private.gguf", seed=2)
    links = {
        "root": Path("/"),
        "sibling.gguf": (sibling / "tiny.gguf").resolve(),
        "sibling-blobs": sibling.parents[1] / "blobs",
        "elsewhere": elsewhere,
        "private.gguf": elsewhere / "private.gguf",
        "absolute.gguf": (snapshot / "tiny.gguf").resolve().parent / ".." / ".." / "models--org--other-GGUF" / "blobs",
    }
    for name, target in links.items():
        (snapshot / name).symlink_to(target)
    return links


@pytest.mark.parametrize("store", ["loops", "outside", "both"])
def test_a_snapshot_lists_only_its_own_files_and_says_what_it_passed_over(cli, home: Path, store: str) -> None:
    snapshot = _gguf_repo(home)
    names = _loops(snapshot) if store in ("loops", "both") else []
    links = _outside(home, snapshot) if store in ("outside", "both") else {}
    found, err = listing(cli)
    ours = sorted(name for name in found if name.startswith("hf:org/tiny-GGUF"))
    assert ours == ["hf:org/tiny-GGUF"] and found["hf:org/tiny-GGUF"]["runs"]
    assert found["hf:org/tiny-GGUF"]["path"] == str(snapshot / "tiny.gguf")
    assert err.startswith("attnviz: skipped in the model stores: ") and "a link out of its repository's blobs/" in err
    count = 58 * (store != "outside") + len(links)
    assert f"{count} × a link out of its repository's blobs/" in err
    for name in [*names, *(f"{link}/x.gguf" for link in links), *(link for link in links if link.endswith(".gguf"))]:
        refused(f"hf:org/tiny-GGUF/{name}", "is a link" if "/" in name else "a link out of its repository's blobs/")
    assert model_location("hf:org/tiny-GGUF") == (snapshot / "tiny.gguf", "gguf")


@pytest.mark.parametrize("link", ["the snapshot", "a folder in it"])
def test_a_snapshot_linking_to_root_no_longer_lists_the_machines_files(cli, home: Path, link: str) -> None:
    """The issue's case: a snapshot that is (or holds) a link to `/` listed every GGUF file on the machine as
    hf:org/root/…, each then runnable by that name."""
    snapshot = cache_repo(_hub(home), "org/root", {"README.md": "# empty"})
    write_tiny_llama(home / "anywhere.gguf")
    if link == "the snapshot":
        (snapshot / "README.md").unlink()
        snapshot.rmdir()
        snapshot.symlink_to("/")
        inside = f"{home}/anywhere.gguf".lstrip("/")
    else:
        (snapshot / "root").symlink_to("/")
        inside = f"root{home}/anywhere.gguf"
    found, err = listing(cli)
    assert list(found) == ["hf:org/root"] and not found["hf:org/root"]["runs"]
    if link == "the snapshot":
        assert err == "" and f"{snapshot} is a link" in found["hf:org/root"]["note"]
        refused("hf:org/root", "is a link")
    else:
        assert "1 × a link out of its repository's blobs/" in err and str(snapshot / "root") in err
        refused("hf:org/root", "no config.json and no .gguf file")
    refused(f"hf:org/root/{inside}", "is a link")


@pytest.mark.parametrize(
    "damage",
    ["blob-outside", "blob-to-sibling", "blob-dangling", "blob-loop", "blobs-link", "blob-folder"],
)
def test_a_blob_that_leads_out_of_its_blobs_folder_is_not_read(cli, home: Path, damage: str) -> None:
    snapshot = _gguf_repo(home)
    blob = (snapshot / "tiny.gguf").resolve()
    blobs = blob.parent
    outside = write_tiny_llama(home / "outside.gguf", seed=3)
    if damage == "blobs-link":  # the whole blobs folder moved out and linked back
        os.rename(blobs, home / "moved")
        blobs.symlink_to(home / "moved")
    else:
        blob.unlink()
        target = {"blob-outside": outside, "blob-to-sibling": _gguf_repo(home, "org/b-GGUF", 4).resolve(),
                  "blob-dangling": home / "gone.gguf", "blob-loop": blob, "blob-folder": home}[damage]  # fmt: skip
        if damage == "blob-to-sibling":
            target = (target / "tiny.gguf").resolve()
        blob.symlink_to(target)
    found, err = listing(cli)
    assert "hf:org/tiny-GGUF" in found and not found["hf:org/tiny-GGUF"]["runs"]
    assert "no config.json and no GGUF file" in found["hf:org/tiny-GGUF"]["note"]
    assert "1 × a link" in err and str(snapshot / "tiny.gguf") in err
    refused("hf:org/tiny-GGUF/tiny.gguf", str(snapshot / "tiny.gguf"), "is a link")
    refused("hf:org/tiny-GGUF", "no config.json and no .gguf file")


@pytest.mark.parametrize("which", ["repository", "snapshots", "snapshot", "refs"])
def test_a_repository_reached_through_a_link_is_listed_as_not_running(cli, home: Path, which: str) -> None:
    real = _gguf_repo(home, "org/real-GGUF")
    repository = _gguf_repo(home, "org/tiny-GGUF", seed=1).parents[1]
    place = {"repository": repository, "snapshots": repository / "snapshots", "refs": repository / "refs",
             "snapshot": next((repository / "snapshots").iterdir())}[which]  # fmt: skip
    os.rename(place, home / "moved")
    place.symlink_to(home / "moved")
    found, err = listing(cli)
    assert found["hf:org/real-GGUF"]["runs"] and found["hf:org/real-GGUF"]["path"] == str(real / "tiny.gguf")
    assert not found["hf:org/tiny-GGUF"]["runs"] and "is a link" in found["hf:org/tiny-GGUF"]["note"]
    refused("hf:org/tiny-GGUF", str(place), "is a link")
    refused("hf:org/tiny-GGUF/tiny.gguf", str(place), "is a link")


@pytest.mark.parametrize("file", ["config.json", "tokenizer.json", "model.safetensors", "sub/extra.json"])
def test_a_checkpoint_folder_with_one_file_linked_out_does_not_load(cli, home: Path, file: str) -> None:
    files = {"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}", "model.safetensors": "x" * 10}
    snapshot = cache_repo(_hub(home), "org/llama-tiny", files)
    (home / "secret.json").write_text('{"model_type": "llama"}')
    if (snapshot / file).exists():
        (snapshot / file).unlink()
    (snapshot / file).parent.mkdir(exist_ok=True)
    (snapshot / file).symlink_to(home / "secret.json")
    found, err = listing(cli)
    entry = found["hf:org/llama-tiny"]
    assert entry["runs"] is False and entry["format"] == "folder"
    assert f"{snapshot / file} is a link out of its repository's blobs/" in entry["note"]
    assert "1 × a link out of its repository's blobs/" in err
    refused("hf:org/llama-tiny", f"{snapshot / file} is a link out of its repository's blobs/")


# Ollama's store: no link is followed below its root.


def _store(home: Path) -> Path:
    return home / ".ollama" / "models"


def _ollama_loops(manifests: Path) -> list[str]:
    """Links in the manifests tree at each level, looping or leading out; with the names they would give."""
    host, library = manifests / "registry.ollama.ai", manifests / "registry.ollama.ai" / "library"
    for k in range(50):
        (library / f"self{k}").symlink_to(".")  # k⁴ paths for a walk that follows links
    (manifests / "loop.example").symlink_to(".")
    (host / "up").symlink_to("..")
    (library / "tiny" / "copy").symlink_to("latest")  # a manifest that is a link
    (library / "tiny" / "again").symlink_to("../tiny")
    (library / "mutual-a").mkdir()
    (library / "mutual-b").mkdir()
    (library / "mutual-a" / "b").symlink_to("../mutual-b")
    (library / "mutual-b" / "a").symlink_to("../mutual-a")
    (library / "root").symlink_to("/")
    (library / "alias").symlink_to("tiny")
    (host / "mirror").symlink_to("library")
    return ["ollama:self3:tiny", "ollama:tiny:copy", "ollama:alias", "ollama:mirror/tiny", "ollama:mutual-a:b",
            "ollama:root:etc"]  # fmt: skip


def test_links_in_ollamas_manifests_are_passed_over_and_do_not_run(cli, home: Path) -> None:
    blob = pull(_store(home))
    names = _ollama_loops(_store(home) / "manifests")
    found, err = listing(cli)
    assert list(found) == ["ollama:tiny:latest"] and found["ollama:tiny:latest"]["path"] == str(blob)
    assert "59 × a link in Ollama's store" in err
    for name in names:
        refused(name, "is a link; attnviz follows no link inside Ollama's store")
    assert model_location("ollama:tiny") == (blob, "gguf")


@pytest.mark.parametrize("damage", ["blob-outside", "blob-dangling", "blob-loop", "blobs-link", "manifests-link"])
def test_an_ollama_blob_or_folder_reached_through_a_link_is_not_read(cli, home: Path, damage: str) -> None:
    blob = pull(_store(home))
    outside = write_tiny_llama(home / "outside.gguf", seed=5)
    place = {"blobs-link": blob.parent, "manifests-link": _store(home) / "manifests"}.get(damage, blob)
    if damage in ("blobs-link", "manifests-link"):
        os.rename(place, home / "moved")
        place.symlink_to(home / "moved")
    else:
        blob.unlink()
        blob.symlink_to({"blob-outside": outside, "blob-dangling": home / "gone", "blob-loop": blob}[damage])
    found, err = listing(cli)
    if damage == "manifests-link":
        assert found == {} and f"1 × a link in Ollama's store ({place})" in err
        refused("ollama:tiny", str(place), "is a link")
        return
    assert (
        not found["ollama:tiny:latest"]["runs"] and "is reached through the link" in found["ollama:tiny:latest"]["note"]
    )
    refused("ollama:tiny", str(place), "attnviz reads Ollama's blobs only as the files that ollama pull writes")


# Bounds: a store of more entries than a listing should visit, or a disk too slow, ends the walk, said once.


@pytest.mark.parametrize("store", ["hf", "ollama"])
@pytest.mark.parametrize("bound", ["entries", "time"])
def test_a_walk_stops_at_its_bound_and_says_so(cli, home: Path, monkeypatch, store: str, bound: str) -> None:
    if store == "hf":
        snapshot = _gguf_repo(home)
        for k in range(300):
            (snapshot / f"note{k:03}.txt").write_text("x")
    else:
        pull(_store(home))
        for k in range(300):
            (_store(home) / "manifests" / "registry.ollama.ai" / "library" / f"m{k:03}").mkdir()
    if bound == "entries":
        monkeypatch.setattr(walk_module, "MAX_ENTRIES", 100)
    else:
        monkeypatch.setattr(walk_module, "MAX_SECONDS", -1.0)
    found, err = listing(cli)
    said = "stopped after 100 entries" if bound == "entries" else "stopped after -1 seconds"
    assert err.startswith("attnviz: skipped in the model stores: ") and said in err
    assert err.rstrip().endswith("the rest of the stores was not looked at")
    assert len(cli("models", "--no-color").err.splitlines()) == 1


def test_a_walk_visits_each_real_folder_once(home: Path, tmp_path: Path) -> None:
    """Bind mounts and the like: the same folder under two names is walked once (by device and inode)."""
    walk = walk_module.Walk()
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "x").write_text("x")
    assert walk.entries(folder) == [folder / "x"]
    assert walk.entries(folder) == [] and walk.skipped == {"a folder seen before": (1, str(folder))}
    (tmp_path / "link").symlink_to(folder)
    assert walk_module.Walk().entries(tmp_path / "link") == []  # a link is no folder to walk
    assert walk_module.Walk().entries(tmp_path / "link", root=True) == [tmp_path / "link" / "x"]  # but a root may be


def test_a_store_root_may_be_a_link(cli, home: Path, tmp_path: Path, monkeypatch) -> None:
    """The user's own setting (OLLAMA_MODELS, HF_HUB_CACHE, a ~/.cache moved to another disk) is followed."""
    real = tmp_path / "disk"
    blob = pull(real / "ollama")
    cache_repo(real / "hub", "org/tiny-GGUF", {"tiny.gguf": write_tiny_llama(tmp_path / "t.gguf")})
    (tmp_path / "ollama-link").symlink_to(real / "ollama")
    (tmp_path / "hub-link").symlink_to(real / "hub")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama-link"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-link"))
    found, err = listing(cli)
    assert err == "" and found["ollama:tiny:latest"]["runs"] and found["hf:org/tiny-GGUF"]["runs"]
    assert model_location("ollama:tiny")[0] == tmp_path / "ollama-link" / blob.relative_to(real / "ollama")


# Any shape: a snapshot of random folders, files and links, each link to another entry, `.`, `/`, its own blobs,
# a sibling's blobs, a file or folder outside, or nothing. Whatever the shape, the listing and the names agree,
# and nothing is read from outside the snapshot's own files and its repository's blobs.

TARGETS = ["entry", "self", "root", "blob", "sibling-blob", "outside-file", "outside-folder", "dangling", "up"]


@st.composite
def snapshot_shapes(draw: st.DrawFn) -> list[tuple[str, int, str]]:
    """(kind, parent, target) for each new entry: kind folder, file or link; parent an earlier folder (0 is the
    snapshot); a link's target one of TARGETS (an entry: the one with the index drawn next)."""
    shape: list[tuple[str, int, str]] = []
    for _ in range(draw(st.integers(1, 14))):
        folders = [0] + [i + 1 for i, (kind, _, _) in enumerate(shape) if kind == "folder"]
        kind = draw(st.sampled_from(["folder", "file", "link", "link"]))
        target = draw(st.sampled_from(TARGETS)) if kind == "link" else ""
        if target == "entry":
            target = str(draw(st.integers(0, len(shape))))
        shape.append((kind, draw(st.sampled_from(folders)), target))
    return shape


def _build(home: Path, shape: list[tuple[str, int, str]]) -> Path:
    snapshot = _gguf_repo(home)
    blob = (snapshot / "tiny.gguf").resolve()
    sibling = (_gguf_repo(home, "org/other-GGUF", seed=1) / "tiny.gguf").resolve()
    (home / "outside").mkdir()
    write_tiny_llama(home / "outside" / "x.gguf", seed=2)
    places = [snapshot]
    for number, (kind, parent, target) in enumerate(shape):
        path = places[parent] / (f"e{number}.gguf" if kind != "folder" else f"d{number}")
        places.append(path)
        if kind == "folder":
            path.mkdir()
        elif kind == "file":
            write_tiny_llama(path, seed=3)
        else:
            special = {"self": Path("."), "root": Path("/"), "blob": blob, "sibling-blob": sibling,
                       "outside-file": home / "outside" / "x.gguf", "outside-folder": home / "outside",
                       "dangling": home / "gone", "up": Path("..")}  # fmt: skip
            goal = places[int(target)] if target.isdigit() else special[target]
            path.symlink_to(goal if not goal.is_absolute() or target == "root" else os.path.relpath(goal, path.parent))
    return snapshot


def _names(snapshot: Path, home: Path, depth: int = 4) -> set[str]:
    """Every name under which a walk that follows links finds a .gguf file in the test's home (bounded: depth,
    breadth); through a link to `/`, the names of the files outside and of the snapshot's own."""
    names: set[str] = set()
    pending = [(snapshot, "", 0)]
    through_root = [home / "outside" / "x.gguf", snapshot / "tiny.gguf"]
    while pending and len(names) < 2000:
        folder, prefix, level = pending.pop()
        try:
            children = sorted(os.listdir(folder))[:20]
        except OSError:
            continue
        for child in children:
            path = folder / child
            real = Path(os.path.realpath(path))
            if real == Path("/"):
                names.update(prefix + child + str(p) for p in through_root)
            elif real.is_relative_to(home.resolve()) and real.is_dir() and level < depth:
                pending.append((path, prefix + child + "/", level + 1))
            elif child.endswith(".gguf") and real.is_file():
                names.add(prefix + child)
    return names


@FUZZ
@given(shape=snapshot_shapes())
def test_any_snapshot_shape_lists_and_runs_only_its_own_files(cli, tmp_path_factory, monkeypatch, shape) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for variable in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(locate_module, "SYSTEM_OLLAMA", home / "no-service")
    snapshot = _build(home, shape)
    blobs = (snapshot / "tiny.gguf").resolve().parent
    found, err = listing(cli)
    listed = {Path(m["path"]).relative_to(snapshot).as_posix(): m for name, m in found.items() if "tiny-GGUF" in name}
    assert "tiny.gguf" in listed and all(m["runs"] for m in listed.values())
    for name in listed:  # what is listed runs, as the listing names it, from its own files
        shown = f"hf:org/tiny-GGUF/{name}" if len(listed) > 1 else "hf:org/tiny-GGUF"
        assert shown in found and model_location(shown) == (snapshot / name, "gguf")
        real = (snapshot / name).resolve()
        assert real.parent == blobs or not (snapshot / name).is_symlink()
    for name in _names(snapshot, home):  # and nothing else does, under any name a link could give it
        try:
            path, _ = model_location(f"hf:org/tiny-GGUF/{name}")
        except AttnvizError as refusal:
            assert "\n" not in str(refusal)
            continue
        assert name in listed, (name, sorted(listed), err)
