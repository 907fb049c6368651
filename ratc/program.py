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
import stat
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
            except (OSError, ValueError, AttributeError, UnicodeDecodeError):
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
    """A verified program directory: its manifest and byte-exact file contents.

    ratc.program_check.open_program, the loader of `ratc run`, `report` and `train`, also
    sets what it checked the files' meaning of: `module` (program.ir's life module),
    `profile` (model.ir's model, or None), `kernel_table` (kernels.json, or None) and
    `own_platform` (platform.toml's).
    """

    def __init__(self, root: Path, manifest: dict, files: dict[str, bytes]):
        self.root = root
        self.manifest = manifest
        self.files = files
        self.module = self.profile = self.kernel_table = self.own_platform = None

    @property
    def meta(self) -> dict:
        return self.manifest.get("meta", {})

    def path(self, rel: str) -> str:
        """A file's path as messages name it."""
        return str(self.root / rel)

    def text(self, rel: str) -> str:
        """A file's content as text; ProgramError if the program has no such file or it is not UTF-8."""
        if rel not in self.files:
            raise ProgramError(f"{self.root}: the program has no file '{rel}'")
        try:
            return self.files[rel].decode()
        except UnicodeDecodeError as exc:
            raise ProgramError(f"{self.root / rel}: not UTF-8 text (byte {exc.start})") from None

    def names(self, prefix: str = "") -> list[str]:
        """The program's file names under a prefix, sorted."""
        return sorted(n for n in self.files if n.startswith(prefix))

    def platform(self, override: str | None = None):
        """The platform the program was compiled for (its platform.toml), unless overridden."""
        from ratc.platform import load_platform, parse_platform

        if override:
            return load_platform(override)
        if self.own_platform is not None:
            return self.own_platform
        if "platform.toml" in self.files:
            return parse_platform(self.text("platform.toml"), str(self.root / "platform.toml"))
        return load_platform(self.meta.get("platform", "mt3000"))


def _read_regular(root: Path, rel: str) -> bytes:
    """The bytes of root/rel, refusing a symlink or anything but a directory on the way and
    a regular file at the end (lstat, then opened without following links: a program
    directory is data, and `secret -> /etc/passwd` in it must not be read)."""
    parts = Path(rel).parts
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise ProgramError(f"{root}: file '{rel}' listed in the manifest is missing; "
                               "recompile with `ratc compile`") from None
        except OSError as exc:
            raise ProgramError(f"{here}: cannot read it: {exc.strerror or exc}") from None
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise ProgramError(f"{here}: is a symbolic link; a program directory holds regular files only "
                               "(recompile with `ratc compile`)")
        if not (stat.S_ISREG(st.st_mode) if last else stat.S_ISDIR(st.st_mode)):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ProgramError(f"{here}: is {kind}; a program directory holds regular files only")
    try:
        fd = os.open(here, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ProgramError(f"{here}: cannot read it: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        # (what was checked above is what is open: replaced in between, it is refused here)
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ProgramError(f"{here}: is not a regular file; a program directory holds regular files only")
        return fh.read()


def load_program(root: str | Path) -> Program:
    """Read a program directory, checking every file against the manifest (and that each is
    a regular file inside it). What the files mean is ratc.program_check's to check."""
    root = Path(root)
    if not root.is_dir():
        raise ProgramError(f"{root}: no such program directory (create one with `ratc compile`)")
    mpath = root / MANIFEST
    if not os.path.lexists(mpath):
        raise ProgramError(f"{root}: not a ratc program (no {MANIFEST})")
    raw = _read_regular(root, MANIFEST)
    try:
        manifest = json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProgramError(f"{mpath}: unreadable manifest: {exc}") from None
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
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts or rel == MANIFEST:
            raise ProgramError(f"{mpath}: malformed manifest: file name {rel!r} leaves the program directory")
        data = _read_regular(root, rel)
        if _digest(data) != want:
            raise ProgramError(f"{root / rel}: content does not match the manifest (edited after "
                               f"compilation?); recompile with `ratc compile`")
        files[rel] = data
    return Program(root, manifest, files)
