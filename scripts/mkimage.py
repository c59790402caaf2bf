#!/usr/bin/env python3
"""Writes a container image as an OCI image layout in a tar (an "oci-archive"), without Docker.

  scripts/mkimage.py --name docker.io/library/gpumux:latest --out build/gpumux-image.tar \\
      --file build/gpumux:/usr/local/bin/gpumux --file /bin/busybox:/bin/busybox \\
      --dir /tmp:1777 --entrypoint /usr/local/bin/gpumux

The archive holds `oci-layout`, `index.json` (one manifest, annotated with the image's name for
`ctr images import` and its tag for `skopeo copy oci-archive:...`) and `blobs/sha256/`: one
gzip-compressed layer, the image configuration (linux, the architecture, Entrypoint, Env, the
layer's diff_id) and the manifest. Loadable with `ctr -n k8s.io images import ARCHIVE`; pushed with
`skopeo copy oci-archive:ARCHIVE docker://REGISTRY/NAME:TAG`.

  --file SRC:DEST   (repeatable) the content of SRC at DEST in the image. Links are followed: the
                    file stored at DEST is what SRC points to. Mode 0755 if SRC is executable by
                    its owner, else 0644; owner root.
  --dir DEST[:MODE] (repeatable) an empty folder (mode octal, 0755 by default); the folders above
                    every file are made with 0755.
  --entrypoint ARG..., --cmd ARG..., --env KEY=VALUE (repeatable; PATH is set unless given),
  --arch (amd64 by default), --os (linux).

Reproducible: every entry has mtime 0, uid/gid 0 and no user names, entries are written in the
order of their paths whatever the order of the options, and nothing of the build time or host
goes in (`created` is the epoch): the same inputs (and the same zlib) give the same digests.
Prints the archive, the manifest's digest (the image's digest once pushed) and the sizes. Exit 2
on a bad option or an input that cannot be read, naming it. Standard library only.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import tempfile

DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json'
CONFIG_TYPE = 'application/vnd.oci.image.config.v1+json'
LAYER_TYPE = 'application/vnd.oci.image.layer.v1.tar+gzip'
EPOCH = '1970-01-01T00:00:00Z'


class Failure(Exception):
    pass


def image_path(dest, what):
    """DEST as a relative path inside the image ('usr/local/bin/x'), refusing '..' and ''."""
    parts = [p for p in dest.split('/') if p not in ('', '.')]
    if not parts or '..' in parts:
        raise Failure(f'{what}: {dest!r} is not a path inside the image')
    return '/'.join(parts)


def parse_files(specs):
    """{image path: host path} from SRC:DEST specs; a destination given twice must agree."""
    files = {}
    for spec in specs:
        src, sep, dest = spec.rpartition(':')
        if not sep or not src:
            raise Failure(f'--file {spec}: expected SRC:DEST')
        path = image_path(dest, f'--file {spec}')
        try:
            st = os.stat(src)  # follows links: what is stored is the file they lead to
        except OSError as e:
            raise Failure(f'--file {spec}: {src}: {e.strerror}') from None
        if not stat.S_ISREG(st.st_mode):
            raise Failure(f'--file {spec}: {src} is not a regular file')
        if not os.access(src, os.R_OK):
            raise Failure(f'--file {spec}: {src}: not readable')
        if path in files and os.path.realpath(files[path]) != os.path.realpath(src):
            raise Failure(f'--file {spec}: /{path} is also given as {files[path]}')
        files[path] = src
    return files


def parse_dirs(specs):
    dirs = {}
    for spec in specs:
        dest, sep, mode = spec.partition(':')
        try:
            dirs[image_path(dest, f'--dir {spec}')] = int(mode, 8) if sep else 0o755
        except ValueError:
            raise Failure(f'--dir {spec}: mode {mode!r} is not octal') from None
    return dirs


def entry(name, kind, mode, size=0):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, '', ''
    return info


def write_layer(out, files, dirs):
    """The layer's uncompressed tar into the binary file OUT: folders, then files, by path."""
    folders = dict(dirs)
    for path in files:
        parent = path.rpartition('/')[0]
        while parent:
            folders.setdefault(parent, 0o755)
            parent = parent.rpartition('/')[0]
    clash = sorted(set(folders) & set(files))
    if clash:
        raise Failure(f'/{clash[0]} is both a folder and a file')
    with tarfile.open(fileobj=out, mode='w', format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folders):
            tar.addfile(entry(path, tarfile.DIRTYPE, folders[path]))
        for path in sorted(files):
            src = files[path]
            with open(src, 'rb') as f:
                size = os.fstat(f.fileno()).st_size
                mode = 0o755 if os.fstat(f.fileno()).st_mode & stat.S_IXUSR else 0o644
                tar.addfile(entry(path, tarfile.REGTYPE, mode, size), f)


def hashed_copy(src, dst):
    """Copies binary file SRC (from its start) to DST; returns the sha256 of what was copied."""
    h = hashlib.sha256()
    src.seek(0)
    for chunk in iter(lambda: src.read(1 << 20), b''):
        h.update(chunk)
        dst.write(chunk)
    return h.hexdigest()


def sha256_of(f):
    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 20), b''):
        h.update(chunk)
    return h.hexdigest()


def descriptor(media_type, data):
    return {'mediaType': media_type, 'digest': 'sha256:' + hashlib.sha256(data).hexdigest(),
            'size': len(data)}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(',', ':')).encode()


def tag_of(name):
    """The tag of a reference ('latest' where it has none, as Docker reads it)."""
    last = name.rpartition('/')[2]
    if '@' in last:
        return None
    return last.partition(':')[2] or 'latest'


def image_json(a, env, diff_id, layer_digest, layer_size):
    """(config, manifest, index) as the bytes written; the index names the manifest."""
    # The epoch for `created`, as other reproducible image builders write it.
    config = {'created': EPOCH, 'architecture': a.arch, 'os': a.os,
              'config': {'Env': env, 'WorkingDir': '/'},
              'rootfs': {'type': 'layers', 'diff_ids': ['sha256:' + diff_id]},
              'history': [{'created': EPOCH, 'created_by': 'scripts/mkimage.py'}]}
    if a.entrypoint:
        config['config']['Entrypoint'] = a.entrypoint
    if a.cmd:
        config['config']['Cmd'] = a.cmd
    config = canonical(config)
    manifest = canonical({'schemaVersion': 2, 'mediaType': MANIFEST_TYPE,
                          'config': descriptor(CONFIG_TYPE, config),
                          'layers': [{'mediaType': LAYER_TYPE, 'digest': 'sha256:' + layer_digest,
                                      'size': layer_size}]})
    # containerd's import names the image by io.containerd.image.name; skopeo and the OCI layout
    # select a manifest by org.opencontainers.image.ref.name, the tag.
    annotations = {'io.containerd.image.name': a.name}
    tag = tag_of(a.name)
    if tag:
        annotations['org.opencontainers.image.ref.name'] = tag
    index = canonical({'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json',
                       'manifests': [dict(descriptor(MANIFEST_TYPE, manifest),
                                          platform={'architecture': a.arch, 'os': a.os},
                                          annotations=annotations)]})
    return config, manifest, index


def write_archive(out, layer, layer_digest, layer_size, config, manifest, index):
    """The OCI layout in a tar at OUT, written beside it first and then renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix='.mkimage-', dir=os.path.dirname(os.path.abspath(out)))
    try:
        with os.fdopen(fd, 'wb') as f, tarfile.open(fileobj=f, mode='w',
                                                    format=tarfile.PAX_FORMAT) as tar:
            def put(name, data):
                tar.addfile(entry(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
            put('oci-layout', canonical({'imageLayoutVersion': '1.0.0'}))
            put('index.json', index)
            tar.addfile(entry('blobs', tarfile.DIRTYPE, 0o755))
            tar.addfile(entry('blobs/sha256', tarfile.DIRTYPE, 0o755))
            layer.seek(0)
            tar.addfile(entry('blobs/sha256/' + layer_digest, tarfile.REGTYPE, 0o644, layer_size),
                        layer)
            put('blobs/sha256/' + hashlib.sha256(config).hexdigest(), config)
            put('blobs/sha256/' + hashlib.sha256(manifest).hexdigest(), manifest)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def build(a):
    """Writes the archive a.out; returns the manifest's digest."""
    files, dirs = parse_files(a.file), parse_dirs(a.dir)
    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir):
        raise Failure(f'--out {a.out}: no folder {out_dir}')
    if not a.name or any(c.isspace() for c in a.name):
        raise Failure(f'--name {a.name!r}: not an image name')
    bad = [e for e in a.env if '=' not in e or e.startswith('=')]
    if bad:
        raise Failure(f'--env {bad[0]}: expected KEY=VALUE')
    env = a.env if any(e.startswith('PATH=') for e in a.env) else [DEFAULT_PATH] + a.env
    with tempfile.TemporaryFile() as raw, tempfile.TemporaryFile() as gz:
        write_layer(raw, files, dirs)
        raw_size = raw.tell()
        # mtime 0 and no file name in the gzip header: the compressed bytes depend on the content.
        with gzip.GzipFile(filename='', fileobj=gz, mode='wb', mtime=0) as z:
            diff_id = hashed_copy(raw, z)
        gz_size = gz.tell()
        layer_digest = sha256_of(gz)
        config, manifest, index = image_json(a, env, diff_id, layer_digest, gz_size)
        write_archive(a.out, gz, layer_digest, gz_size, config, manifest, index)
    digest = 'sha256:' + hashlib.sha256(manifest).hexdigest()
    mib = 1024 * 1024
    print(f'{a.out}: {a.name}')
    print(f'  digest {digest}')
    print(f'  {len(files)} files; archive {os.path.getsize(a.out) / mib:.1f} MiB, layer '
          f'{gz_size / mib:.1f} MiB compressed, {raw_size / mib:.1f} MiB uncompressed')
    return digest


def main(argv=None):
    ap = argparse.ArgumentParser(
        description='Write an OCI image archive (oci-layout in a tar) of one layer.')
    ap.add_argument('--name', required=True,
                    help='the image reference, e.g. docker.io/library/gpumux:latest')
    ap.add_argument('--out', required=True, help='the archive to write')
    ap.add_argument('--file', action='append', default=[], metavar='SRC:DEST')
    ap.add_argument('--dir', action='append', default=[], metavar='DEST[:MODE]')
    ap.add_argument('--entrypoint', nargs='+', metavar='ARG')
    ap.add_argument('--cmd', nargs='+', metavar='ARG')
    ap.add_argument('--env', action='append', default=[], metavar='KEY=VALUE')
    ap.add_argument('--arch', default='amd64')
    ap.add_argument('--os', default='linux')
    a = ap.parse_args(argv)
    try:
        build(a)
    except Failure as e:
        print(f'mkimage: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
