"""Safe extraction of a model package (`tritonpkg package --archive`), then verification against its lock.

A package archive comes from elsewhere (a registry, a bucket, a colleague), so it is treated as hostile:
one streaming pass checks each member before anything of it is written — its name under the one path rule
(tritonpkg.safepath), no link leaving the target, no device/FIFO/sparse member, no duplicate, nothing
written through a link — and stops as soon as the member count or the expanded size, extended headers
included, passes its limit (a gzip bomb is refused without being inflated; a GNU long-name or pax header
is refused by its declared size before tarfile reads it). Members are written by this module, not by
tarfile, so owners never reach the disk and permission bits only narrow (no setuid, no group/other
write). Everything lands in a staging folder beside the target that is renamed into
place only when the whole archive passed: a refused archive leaves no half-unpacked target."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tritonpkg import safepath
from tritonpkg.errors import PackageError
from tritonpkg.repository import lock as lock_mod
from tritonpkg.repository.archive import REPO_PREFIX, WHEELS_PREFIX

COPY_CHUNK = 1 << 20
DEFAULT_MAX_MEMBERS = 20_000
DEFAULT_MAX_BYTES = 4 << 30
MAX_HEADER_BYTES = 64 << 10  # one GNU long-name/long-link or pax header: a 4 KiB name, a link, a few records
MAX_HEADER_CHAIN = 8  # extended headers before one member (pax global + pax + GNU L + K in practice)
_EXTENDED = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link",
             tarfile.XHDTYPE: "pax", tarfile.XGLTYPE: "pax global", tarfile.SOLARIS_XHDTYPE: "Solaris pax"}


class UnsafeArchiveError(PackageError):
    """The archive holds a member that could write outside the target, or is larger than allowed."""


class LockMismatchError(PackageError):
    """An unpacked file is missing from the lock, or differs from it."""


@dataclass(frozen=True)
class UnpackLimits:
    """Defaults fit a model package (code, configs, tokenizers, plugin wheels; weights travel apart)."""

    max_members: int = DEFAULT_MAX_MEMBERS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_members < 1 or self.max_bytes < 1:
            raise PackageError("unpack limits must be positive", field="max_members/max_bytes",
                               expected="integers >= 1")


@dataclass
class UnpackedPackage:
    root: Path
    files: int = 0
    bytes: int = 0
    wheels: list[Path] = field(default_factory=list)

    @property
    def repository(self) -> Path:
        return self.root / REPO_PREFIX

    @property
    def wheels_dir(self) -> Path:
        return self.root / WHEELS_PREFIX


def unpack_archive(archive: str | Path, target: str | Path, limits: UnpackLimits = UnpackLimits()) -> UnpackedPackage:
    """Extract `archive` into `target` (which must not exist yet) and return what it holds."""
    archive, target = Path(archive), Path(target).absolute()
    if not archive.is_file():
        raise PackageError("package archive not found", file=archive,
                           expected="a .tar.gz from `tritonpkg package --archive`")
    if target.exists():
        raise PackageError("unpack target already exists", file=target, expected="a path that does not exist yet")
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.unpack-", dir=target.parent))
    try:
        result = _extract(archive, stage, limits)
        os.chmod(stage, 0o755)  # noqa: S103  mkdtemp makes it private; the served package is read by the server
        os.rename(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    result.root = target
    result.wheels = sorted(p for p in result.wheels_dir.glob("*.whl")) if result.wheels_dir.is_dir() else []
    return result


class _Budget:
    """The expanded bytes of one unpack, headers included, checked as each header is parsed."""

    def __init__(self, archive: Path, limits: UnpackLimits) -> None:
        self.archive, self.limits = archive, limits
        self.used = 0
        self.chain = 0  # extended headers seen since the last member header

    def take(self, n: int, where: str) -> None:
        self.used += n
        if self.used > self.limits.max_bytes:
            raise UnsafeArchiveError(f"expanded size passes {self.limits.max_bytes} bytes at {where}",
                                     file=self.archive, expected=f"at most {self.limits.max_bytes} bytes, headers "
                                                                 "included (UnpackLimits.max_bytes)")

    def header(self, info: tarfile.TarInfo) -> None:
        """Called with each raw 512-byte header before tarfile reads what follows it: an extended header's
        size is bounded here, before tarfile allocates a buffer of that size to read it into."""
        kind = _EXTENDED.get(info.type)
        if info.type == tarfile.GNUTYPE_SPARSE:
            raise UnsafeArchiveError("a GNU sparse member", file=self.archive, expected="regular files")
        if kind is None:
            self.chain = 0
            self.take(tarfile.BLOCKSIZE, "a member header")
            return
        if info.size > MAX_HEADER_BYTES:
            raise UnsafeArchiveError(f"a {kind} header of {info.size} bytes", file=self.archive,
                                     expected=f"extended headers of at most {MAX_HEADER_BYTES} bytes")
        self.chain += 1
        if self.chain > MAX_HEADER_CHAIN:
            raise UnsafeArchiveError(f"more than {MAX_HEADER_CHAIN} extended headers in a row", file=self.archive,
                                     expected="a few extended headers before each member")
        self.take(tarfile.BLOCKSIZE + -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE, f"a {kind} header")


def _bounded_tarinfo(budget: _Budget) -> type[tarfile.TarInfo]:
    """A TarInfo whose header processing goes through `budget` first. tarfile reads every header of a
    member, extended ones included, through the class it was opened with (`fromtarfile` -> `_proc_member`),
    so this is the one place that sees a header's declared size before the read."""

    def sparse(*_args, **_kwargs):
        raise UnsafeArchiveError("a GNU sparse member (pax sparse map)", file=budget.archive,
                                 expected="regular files")

    class BoundedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tarfile_):
            budget.header(self)
            return super()._proc_member(tarfile_)  # type: ignore[misc] # tarfile's hook, not in typeshed

        _proc_sparse = _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = sparse

    return BoundedTarInfo


def _extract(archive: Path, stage: Path, limits: UnpackLimits) -> UnpackedPackage:
    result = UnpackedPackage(root=stage)
    seen: set[str] = set()
    links: set[str] = set()
    budget = _Budget(archive, limits)
    try:
        tar = tarfile.open(archive, mode="r:*", tarinfo=_bounded_tarinfo(budget))  # noqa: SIM115  `with tar:` below
    except (tarfile.TarError, OSError) as exc:
        raise UnsafeArchiveError(f"not a readable tar archive: {exc}", file=archive,
                                 expected="a .tar.gz from `tritonpkg package --archive`") from exc
    with tar:
        count = 0
        while True:
            try:
                member = tar.next()
            except tarfile.TarError as exc:
                raise UnsafeArchiveError(f"corrupt archive after {count} members: {exc}", file=archive) from exc
            if member is None:
                break
            count += 1
            if count > limits.max_members:
                raise UnsafeArchiveError(f"more than {limits.max_members} members", file=archive,
                                         expected=f"at most {limits.max_members} (UnpackLimits.max_members)")
            name = _check_member(member, archive, seen, links)
            if member.isfile():
                result.bytes += member.size
                budget.take(member.size, f"member {safepath.quote(name)}")
            try:
                if member.isfile():
                    _write_file(archive, tar, member, stage / name)
                    result.files += 1
                elif member.isdir():
                    (stage / name).mkdir(parents=True, exist_ok=True)
                else:
                    _write_link(member, stage, name, archive)
                    links.add(name)
            except OSError as exc:
                raise UnsafeArchiveError(f"member {safepath.quote(name)} cannot be written: {exc.strerror or exc}",
                                         file=archive, expected="a tree of distinct files and folders") from exc
    _check_symlinks_resolve_inside(stage, links, archive)
    return result


def _check_symlinks_resolve_inside(stage: Path, links: set[str], archive: Path) -> None:
    """Once every member exists: a symlink's meaning can change as later members appear (`a/l -> x/..`
    before `a/x -> ..`), so the lexical check at write time is completed by resolving them all now."""
    for name in sorted(links):
        if (stage / name).is_symlink() and not safepath.within(stage / name, stage):
            raise UnsafeArchiveError(f"symlink {safepath.quote(name)} -> {safepath.quote(os.readlink(stage / name))} "
                                     "resolves outside the target",
                                     file=archive, expected="links to members inside the archive")


def _check_member(member: tarfile.TarInfo, archive: Path, seen: set[str], links: set[str]) -> str:
    """The member's name under the one path rule (tritonpkg.safepath), or an error saying why it may not
    be extracted."""
    raw = member.name
    try:
        name = safepath.check_name(raw, source=archive, what="member")
    except safepath.UnsafePathError as exc:
        raise UnsafeArchiveError(f"member {safepath.quote(raw)} breaks the path rule: {exc.rule}", file=archive,
                                 expected="relative paths of non-empty segments, without '.', '..' or control "
                                          "characters") from None
    shown = safepath.quote(name)
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        kind = "FIFO" if member.isfifo() else "device file"
        raise UnsafeArchiveError(f"member {shown} is a {kind}", file=archive,
                                 expected="regular files, folders and links inside the archive")
    if member.issparse():
        raise UnsafeArchiveError(f"member {shown} is a sparse file", file=archive, expected="regular files")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeArchiveError(f"member {shown} has unsupported type {member.type!r}", file=archive)
    parts = name.split("/")
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            raise UnsafeArchiveError(f"member {shown} would be written through the link "
                                     f"{safepath.quote('/'.join(parts[:i]))}", file=archive,
                                     expected="no members below a link")
    if name in seen:
        raise UnsafeArchiveError(f"member {shown} appears twice", file=archive, expected="unique member names")
    seen.add(name)
    if member.issym() or member.islnk():
        _check_link_target(member, name, archive)
    return name


def _check_link_target(member: tarfile.TarInfo, name: str, archive: Path) -> None:
    kind = "symlink" if member.issym() else "hardlink"
    try:
        safepath.link_target(name, member.linkname, symbolic=member.issym(), source=archive, what=kind)
    except safepath.UnsafePathError as exc:
        raise UnsafeArchiveError(f"{kind} {safepath.quote(name)} -> {safepath.quote(member.linkname)} points outside "
                                 f"the target: {exc.rule}", file=archive,
                                 expected="links to members inside the archive") from None


def _write_file(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = tar.extractfile(member)
    if src is None:
        raise UnsafeArchiveError(f"{safepath.quote(member.name)} has no readable contents", file=archive,
                                 expected="regular file members")
    mode = (stat.S_IMODE(member.mode) & 0o755) | stat.S_IRUSR  # never wider than the archive says, never setuid
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, COPY_CHUNK)
    os.chmod(path, mode)


def _write_link(member: tarfile.TarInfo, stage: Path, name: str, archive: Path) -> None:
    path = stage / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if member.issym():
        os.symlink(member.linkname, path)
        return
    source = stage / PurePosixPath(member.linkname)
    if not safepath.within(source, stage) or not source.is_file() or source.is_symlink():
        raise UnsafeArchiveError(f"hardlink {safepath.quote(name)} -> {safepath.quote(member.linkname)} names no "
                                 "earlier regular file",
                                 file=archive, expected="hardlinks to files extracted before them")
    os.link(source, path)


def verify_unpacked(package: UnpackedPackage, archive: str | Path, wheels: bool = True) -> None:
    """Every file under repository/ is named by the lock with the same sha256, every file the lock names is
    there, and (unless `wheels` is False: a reader that installs none, such as a followed adapter list taking
    adapter folders from a release's archive rebuilt from its packaged repository) the wheels are exactly the
    plugins the lock lists. The first problems are in the error."""
    repo = package.repository
    lock_path = repo / lock_mod.LOCK_NAME
    if not lock_path.is_file():
        raise LockMismatchError(f"the package has no {REPO_PREFIX}/{lock_mod.LOCK_NAME}", file=archive,
                                expected="an archive written by `tritonpkg package --archive`")
    lock = lock_mod.read(repo)
    named = {lock_mod.LOCK_NAME}
    plugins: dict[str, str | None] = {}  # bundled wheel -> sha256 (None: a lock from before it was recorded)
    for model_name, model in lock["models"].items():
        named.add(f"{model_name}/config.pbtxt")
        for entry in model["versions"].values():
            named.update(entry.get("files", {}))
            for plugin in entry.get("plugins", []):
                if isinstance(plugin, str):
                    plugins[plugin] = None
                elif plugin.get("wheel"):
                    plugins[plugin["wheel"]] = plugin.get("sha256")
    for rel in sorted(named):  # the lock's entries become paths below: none may lead out of the repository
        try:
            safepath.check_name(rel, source=archive, what="lock entry")
        except safepath.UnsafePathError as exc:
            raise LockMismatchError(f"lock entry {safepath.quote(rel)} breaks the path rule: {exc.rule}",
                                    file=archive, expected=f"files of the repository in {lock_mod.LOCK_NAME}") from None
    problems = lock_mod.verify(repo)
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if (path.is_file() or path.is_symlink()) and rel not in named:
            problems.append(f"{rel}: not in the lock")
    if not wheels:
        plugins.clear()
    bundled = {p.name: p for p in package.wheels} if wheels else {}
    for name in sorted(set(bundled) | set(plugins)):
        if name not in plugins:
            problems.append(f"{WHEELS_PREFIX}/{name}: not listed as a plugin in the lock")
        elif name not in bundled:
            problems.append(f"{WHEELS_PREFIX}/{name}: listed in the lock but missing")
        elif plugins[name] and lock_mod.sha256(bundled[name].read_bytes()) != plugins[name]:
            problems.append(f"{WHEELS_PREFIX}/{name}: sha256 differs from the lock")
    if problems:
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise LockMismatchError(f"{len(problems)} file(s) do not match the lock:\n  {shown}", file=archive,
                                expected=f"files exactly as recorded in {lock_mod.LOCK_NAME}")
