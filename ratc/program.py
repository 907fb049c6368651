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
import stat
from pathlib import Path, PurePosixPath

from ratc import __version__
from ratc.atomic import recover, staged, write_file
from ratc.errors import OutputError, RatcError
from ratc.input_files import json_value

MANIFEST = "manifest.json"
FORMAT = "ratc-program/1"


class ProgramError(RatcError):
    """A program directory that is missing, incomplete or tampered with."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_program(outdir: str | Path, files: dict[str, str | bytes], meta: dict | None = None) -> Path:
    """Write files (relative path -> content) and their manifest to outdir, replacing it whole.

    The directory is built beside outdir and swapped in (`ratc.atomic_dir`), so outdir holds
    the old program or the new one at every instant, even under SIGKILL. A symlink keeps
    pointing where it did and the directory it names is replaced. Only a ratc program (or
    an empty directory) is ever replaced."""
    outdir = resolve_output_dir(outdir)
    check_replaceable(outdir)
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        recover(outdir)
        with staged(outdir) as staging:
            hashes = {}
            for rel in sorted(files):
                if rel == MANIFEST or Path(rel).is_absolute() or ".." in Path(rel).parts:
                    raise ValueError(f"bad program file name {rel!r}")
                data = files[rel].encode() if isinstance(files[rel], str) else files[rel]
                path = staging.path / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                hashes[rel] = _digest(data)
            manifest = {"format": FORMAT, "ratc": __version__, "meta": meta or {}, "files": hashes}
            (staging.path / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            staging.swap_in(check_replaceable)
    except OSError as exc:
        raise OutputError.refused(outdir, exc) from None
    return outdir


def resolve_output_dir(outdir: str | Path) -> Path:
    """The directory a program write replaces: through a symlink (which stays), absolute."""
    outdir = Path(os.path.abspath(outdir))
    if outdir.is_symlink():
        try:
            outdir = outdir.resolve(strict=True)
        except (OSError, RuntimeError) as exc:      # a loop, or a link to nothing
            raise ProgramError(f"{outdir}: a symbolic link that leads nowhere ({exc.__class__.__name__}: "
                               f"{getattr(exc, 'strerror', None) or exc}); remove it or choose another -o") from None
    return outdir


def _read_manifest(mpath: Path) -> dict | None:
    """A manifest in ratc's format, or None (missing, unreadable, another format)."""
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
            or not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("derived", []), list):
        return None
    return manifest


def ratc_written(manifest: dict) -> set[str]:
    """The names (relative, posix) of every file ratc wrote into a program directory."""
    return {MANIFEST} | set(manifest["files"]) | {n for n in manifest.get("derived", []) if isinstance(n, str)}


def foreign_files(outdir: Path, manifest: dict) -> list[str]:
    """Entries of a program directory that ratc did not write (files, links, other things)."""
    own = ratc_written(manifest)
    own_dirs = {p for name in own for p in Path(name).parents if str(p) != "."}
    found = []
    for root, dirs, names in os.walk(outdir):
        for name in sorted(dirs + names):
            path = Path(root) / name
            rel = path.relative_to(outdir).as_posix()
            if path.is_symlink() or not (rel in own and path.is_file() or Path(rel) in own_dirs and path.is_dir()):
                found.append(rel + ("/" if path.is_dir() and not path.is_symlink() else ""))
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink() and (Path(root) / d).relative_to(outdir) in own_dirs]
    return sorted(found)


def check_replaceable(outdir: Path) -> None:
    """Raise ProgramError unless outdir may be replaced by a new program: it does not exist,
    or is an empty directory, or is a ratc program holding only files ratc wrote, and it is
    not (nor holds) the current working directory."""
    if not os.path.lexists(outdir):
        return
    if not outdir.is_dir():
        raise ProgramError(f"{outdir}: exists and is not a directory; refusing to overwrite it")
    try:
        cwd = Path.cwd().resolve()
    except OSError:         # the current directory was removed: it is nowhere to be replaced
        cwd = None
    if cwd is not None and (cwd == outdir.resolve() or outdir.resolve() in cwd.parents):
        raise ProgramError(f"{outdir}: is (or holds) the current directory; refusing to replace it "
                           "(run ratc from elsewhere or choose another -o)")
    try:
        if not any(outdir.iterdir()):
            return
    except OSError as exc:
        raise OutputError.refused(outdir, exc) from None
    manifest = _read_manifest(outdir / MANIFEST)
    if manifest is None:
        why = "no" if not (outdir / MANIFEST).exists() else "not a ratc"
        raise ProgramError(f"{outdir}: exists and is not a ratc program directory ({why} {MANIFEST}); "
                           "refusing to overwrite it (choose another -o)")
    foreign = foreign_files(outdir, manifest)
    if foreign:
        shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
        raise ProgramError(f"{outdir}: holds files ratc did not write ({shown}); refusing to replace it "
                           "(move them out, or choose another -o)")


def record_derived(outdir: str | Path, paths) -> None:
    """List files ratc is about to write into a program directory (a report and its pictures)
    in its manifest as derived, so that recompiling may replace them; no-op elsewhere."""
    outdir = Path(outdir)
    mpath = outdir / MANIFEST
    manifest = _read_manifest(mpath)
    if manifest is None:
        return
    names = set(manifest.get("derived", []))
    for path in paths:
        try:
            names.add(Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(outdir))).as_posix())
        except ValueError:
            pass        # written outside the program directory
    names -= set(manifest["files"]) | {MANIFEST}
    if names != set(manifest.get("derived", [])):
        manifest["derived"] = sorted(names)
        try:
            write_file(mpath, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise OutputError.refused(mpath, exc) from None


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


def _outside(rel: str) -> bool:
    """Whether a manifest's file name is anything but a plain relative path of a file inside
    the directory ('a/b.rasm'): empty, '.', absolute, with '..', a NUL or an unnormalized form."""
    path = PurePosixPath(rel)
    return (not rel or "\x00" in rel or path.is_absolute() or not path.parts or ".." in path.parts
            or path.as_posix() != rel or rel == MANIFEST)


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
        manifest = json_value(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
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
        if _outside(rel):
            raise ProgramError(f"{mpath}: malformed manifest: file name {rel!r} is not a plain relative path "
                               "inside the program directory")
        data = _read_regular(root, rel)
        if _digest(data) != want:
            raise ProgramError(f"{root / rel}: content does not match the manifest (edited after "
                               f"compilation?); recompile with `ratc compile`")
        files[rel] = data
    return Program(root, manifest, files)
