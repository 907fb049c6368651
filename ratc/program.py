"""A compiled program on disk: a directory of files plus a manifest of their content hashes.

`ratc compile` writes one; `ratc run` and `ratc report` read one back and refuse any
directory whose files do not match the manifest (an edited kernel, a missing plan).
The directory is written next to its final place and renamed into it, so a reader never
sees half a program.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ratc import __version__
from ratc.errors import OutputError, RatcError

MANIFEST = "manifest.json"
FORMAT = "ratc-program/1"


class ProgramError(RatcError):
    """A program directory that is missing, incomplete or tampered with."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_program(outdir: str | Path, files: dict[str, str | bytes], meta: dict | None = None) -> Path:
    """Write files (relative path -> content) and their manifest to outdir, replacing it whole."""
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise ProgramError(f"{outdir}: exists and is not a directory; refusing to overwrite it")
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    except OSError as exc:
        raise OutputError.refused(outdir, exc) from None
    umask = os.umask(0)
    os.umask(umask)
    # mkdtemp makes the directory private (0700); give it the permissions mkdir() would.
    os.chmod(tmp, 0o777 & ~umask)
    try:
        hashes = {}
        for rel in sorted(files):
            if rel == MANIFEST or Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise ValueError(f"bad program file name {rel!r}")
            data = files[rel].encode() if isinstance(files[rel], str) else files[rel]
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            hashes[rel] = _digest(data)
        manifest = {"format": FORMAT, "ratc": __version__, "meta": meta or {}, "files": hashes}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if outdir.exists():
            # Only ever replace something that is itself a ratc program (or empty).
            if any(outdir.iterdir()) and not (outdir / MANIFEST).exists():
                raise ProgramError(f"{outdir}: exists and is not a ratc program directory; "
                                   f"refusing to overwrite it")
            old = outdir.with_name(f".{outdir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(outdir, old)
            os.replace(tmp, outdir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, outdir)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError.refused(outdir, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return outdir


def owning_program(path) -> tuple[Path, str] | None:
    """(program directory, file name in it) when `path` names a file a ratc program's
    manifest lists, or the manifest itself; None otherwise (the nearest manifest decides)."""
    p = Path(path).resolve()        # (through symlinks, which writes follow)
    for root in p.parents:
        manifest = root / MANIFEST
        if manifest.is_file():
            try:
                own = set(json.loads(manifest.read_text()).get("files", {})) | {MANIFEST}
            except (OSError, ValueError, AttributeError, RecursionError):
                return None     # load_program reports a damaged manifest
            rel = p.relative_to(root).as_posix()
            return (root, rel) if rel in own else None
    return None


def refuse_own_file(path, flag: str) -> None:
    """Raise if the output `path` (given by `flag`) would overwrite a file of a ratc program."""
    own = owning_program(path)
    if own is not None:
        raise ProgramError(f"{flag} {path} would overwrite the program's own {own[1]} (in {own[0]}); "
                           "choose another name")


class Program:
    """A verified program directory: its manifest and byte-exact file contents."""

    def __init__(self, root: Path, manifest: dict, files: dict[str, bytes]):
        self.root = root
        self.manifest = manifest
        self.files = files

    @property
    def meta(self) -> dict:
        return self.manifest.get("meta", {})

    def text(self, rel: str) -> str:
        """A file's content as text; ProgramError if the program has no such file."""
        if rel not in self.files:
            raise ProgramError(f"{self.root}: the program has no file '{rel}'")
        try:
            return self.files[rel].decode()
        except UnicodeDecodeError as exc:
            raise ProgramError(f"{self.root / rel}: not a UTF-8 text file (byte {exc.start}); "
                               "recompile with `ratc compile`") from None

    def names(self, prefix: str = "") -> list[str]:
        """The program's file names under a prefix, sorted."""
        return sorted(n for n in self.files if n.startswith(prefix))

    def module_with(self, marker: str):
        """The parsed and verified module of the first IR file holding `marker` (e.g.
        'life.pipeline'), or None."""
        from ratc.ir import load_dialects, parse_module, verify

        load_dialects()
        for name in self.names():
            if name.endswith((".ir", ".mlir")) and marker in self.text(name):
                # verified here, so that no reader takes an op's attributes on trust
                module = parse_module(self.text(name), str(self.root / name))
                verify(module)
                return module
        return None

    def platform(self, override: str | None = None):
        """The platform the program was compiled for (its platform.toml), unless overridden."""
        from ratc.platform import load_platform, parse_platform

        if override:
            return load_platform(override)
        if "platform.toml" in self.files:
            return parse_platform(self.text("platform.toml"), str(self.root / "platform.toml"))
        return load_platform(self.meta.get("platform", "mt3000"))


def load_program(root: str | Path) -> Program:
    """Read a program directory, checking every file against the manifest."""
    root = Path(root)
    if not root.is_dir():
        raise ProgramError(f"{root}: no such program directory (create one with `ratc compile`)")
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise ProgramError(f"{root}: not a ratc program (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProgramError(f"{mpath}: unreadable manifest: {exc}") from None
    except RecursionError:
        raise ProgramError(f"{mpath}: unreadable manifest: arrays or objects nested too deeply") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ProgramError(f"{mpath}: unknown program format {manifest.get('format') if isinstance(manifest, dict) else None!r} "
                           f"(expected {FORMAT!r})")
    listed = manifest.get("files", {})
    if not isinstance(listed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in listed.items()) \
            or not isinstance(manifest.get("meta", {}), dict):
        raise ProgramError(f"{mpath}: malformed manifest: 'files' must map file names to sha256 digests "
                           "and 'meta' be an object; recompile with `ratc compile`")
    files = {}
    for rel, want in sorted(listed.items()):
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ProgramError(f"{mpath}: malformed manifest: file name {rel!r} leaves the program directory")
        path = root / rel
        try:
            if not path.is_file():
                raise ProgramError(f"{root}: file '{rel}' listed in the manifest is missing; "
                                   f"recompile with `ratc compile`")
            data = path.read_bytes()
        except OSError as exc:      # a name too long, a file without read permission
            raise ProgramError(f"{mpath}: cannot read the listed file {rel!r}: {exc.strerror}") from None
        if _digest(data) != want:
            raise ProgramError(f"{path}: content does not match the manifest (edited after "
                               f"compilation?); recompile with `ratc compile`")
        files[rel] = data
    return Program(root, manifest, files)
