"""ldd without running anything: the dynamic section of an ELF file (pyelftools) and the dynamic loader's
search for each library it needs, over a directory tree that stands for an image's file system.

The loader's order (glibc ld.so(8), "Rpath token expansion" and the search list): DT_RPATH of the object
(only when it has no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, the directories of /etc/ld.so.conf (the
cache ldconfig builds from them), then the trusted directories /lib and /usr/lib (and, on Debian and
Ubuntu, their x86_64-linux-gnu multiarch directories, which the distribution lists in
/etc/ld.so.conf.d/x86_64-linux-gnu.conf). A name is looked up as a file name in each directory.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

TRUSTED = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib", "/lib64", "/usr/lib64")


@dataclass(frozen=True)
class Dynamic:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


def dynamic(data: bytes) -> Dynamic:
    """The DT_SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH entries of an ELF shared object or executable."""
    elf = ELFFile(io.BytesIO(data))
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for section in elf.iter_sections():
        if not isinstance(section, DynamicSection):
            continue
        for tag in section.iter_tags():
            kind = tag.entry.d_tag
            # pyelftools sets the decoded string as an attribute named after the tag (soname, needed, ...)
            value = str(getattr(tag, kind[3:].lower(), ""))
            if kind == "DT_SONAME":
                soname = value
            elif kind == "DT_NEEDED":
                needed.append(value)
            elif kind == "DT_RPATH":
                rpath.extend(p for p in value.split(":") if p)
            elif kind == "DT_RUNPATH":
                runpath.extend(p for p in value.split(":") if p)
    return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))


@dataclass(frozen=True)
class Image:
    """An image's file system as far as the loader sees it: `root` holds its files at their paths."""

    root: Path
    ld_library_path: tuple[str, ...] = ()
    ld_so_conf: tuple[str, ...] = ()

    def path(self, absolute: str) -> Path:
        return self.root / PurePosixPath(absolute).relative_to("/")

    def find(self, name: str, at: str, dyn: Dynamic) -> str | None:
        """Where the loader finds `name` for an object at `at` (absolute), or None."""
        origin = str(PurePosixPath(at).parent)
        rpath = () if dyn.runpath else dyn.rpath
        for directory in (*rpath, *self.ld_library_path, *dyn.runpath, *self.ld_so_conf, *TRUSTED):
            directory = directory.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            candidate = str(PurePosixPath(directory) / name)
            if self.path(candidate).exists():
                return candidate
        return None

    def unresolved(self, at: str) -> list[str]:
        """What ldd would print `=> not found` for, for the object at `at` and everything it loads."""
        missing: list[str] = []
        seen: set[str] = set()
        todo = [at]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            file = self.path(current)
            data = file.read_bytes()
            if not data.startswith(b"\x7fELF"):
                continue  # a stand-in for a library this tree cannot hold (its presence is what counts)
            dyn = dynamic(data)
            for name in dyn.needed:
                found = self.find(name, current, dyn)
                if found is None:
                    missing.append(f"{current}: {name} => not found")
                else:
                    todo.append(found)
        return missing
