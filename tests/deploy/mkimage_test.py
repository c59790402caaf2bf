#!/usr/bin/env python3
"""scripts/mkimage.py writes an OCI image archive whose blobs match their digests, with each file
at its destination, the same digest when built again; scripts/make-image.sh (what `make image`
runs) puts a binary, the libraries ldd lists for it and busybox where they belong. No root, no
container runtime: the archive is read back with tarfile."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts')
MKIMAGE = os.path.join(SCRIPTS, 'mkimage.py')
MAKE_IMAGE = os.path.join(SCRIPTS, 'make-image.sh')


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Image:
    """An archive read back: its members' bytes, index, manifest, config and layer."""

    def __init__(self, path):
        with tarfile.open(path) as tar:
            self.members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        self.index = json.loads(self.members['index.json'])
        self.manifest_digest = self.index['manifests'][0]['digest']
        self.manifest = json.loads(self.blob(self.manifest_digest))
        self.config = json.loads(self.blob(self.manifest['config']['digest']))
        self.layer_gz = self.blob(self.manifest['layers'][0]['digest'])
        self.layer_tar = gzip.decompress(self.layer_gz)
        with tarfile.open(fileobj=io.BytesIO(self.layer_tar)) as tar:
            self.layer = {m.name: m for m in tar}
            self.content = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}

    def blob(self, digest):
        algorithm, hexdigest = digest.split(':')
        assert algorithm == 'sha256', digest
        return self.members['blobs/sha256/' + hexdigest]


class MkImageTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='mkimage-test-')
        self.addCleanup(shutil.rmtree, self.dir)
        self.tool = self.write('tool', b'#!/bin/sh\necho hello\n', 0o750)
        self.data = self.write('data.txt', b'some library\n', 0o600)
        os.symlink('data.txt', os.path.join(self.dir, 'data-link'))

    def write(self, name, content, mode):
        path = os.path.join(self.dir, name)
        with open(path, 'wb') as f:
            f.write(content)
        os.chmod(path, mode)
        return path

    def mkimage(self, out, *args):
        return subprocess.run([sys.executable, MKIMAGE, '--name', 'example.org/team/tool:1.2',
                               '--out', os.path.join(self.dir, out)] + list(args),
                              capture_output=True, text=True)

    def build(self, out='image.tar', *extra):
        r = self.mkimage(out, '--file', f'{self.tool}:/usr/local/bin/tool',
                         '--file', os.path.join(self.dir, 'data-link') + ':/lib/x/libdata.so.1',
                         '--dir', '/tmp:1777', '--entrypoint', '/usr/local/bin/tool', *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return Image(os.path.join(self.dir, out)), r.stdout

    def test_an_oci_layout_whose_blobs_match_their_digests(self):
        image, out = self.build()
        self.assertEqual(json.loads(image.members['oci-layout']), {'imageLayoutVersion': '1.0.0'})
        for name, data in image.members.items():
            if name.startswith('blobs/sha256/'):
                self.assertEqual(sha256(data), name.rpartition('/')[2], name)
        self.assertEqual(len(image.index['manifests']), 1)
        entry = image.index['manifests'][0]
        self.assertEqual(entry['mediaType'], 'application/vnd.oci.image.manifest.v1+json')
        self.assertEqual(entry['size'], len(image.blob(entry['digest'])))
        self.assertEqual(entry['annotations'], {
            'io.containerd.image.name': 'example.org/team/tool:1.2',
            'org.opencontainers.image.ref.name': '1.2'})
        self.assertEqual(image.manifest['config']['size'],
                         len(image.blob(image.manifest['config']['digest'])))
        self.assertEqual(image.manifest['layers'][0]['mediaType'],
                         'application/vnd.oci.image.layer.v1.tar+gzip')
        self.assertEqual(image.manifest['layers'][0]['size'], len(image.layer_gz))
        self.assertEqual(image.config['rootfs'],
                         {'type': 'layers', 'diff_ids': ['sha256:' + sha256(image.layer_tar)]})
        self.assertEqual((image.config['architecture'], image.config['os']), ('amd64', 'linux'))
        self.assertEqual(image.config['config']['Entrypoint'], ['/usr/local/bin/tool'])
        self.assertIn(entry['digest'], out)

    def test_the_layer_holds_each_file_at_its_destination(self):
        image, _ = self.build()
        self.assertEqual(image.content['usr/local/bin/tool'], b'#!/bin/sh\necho hello\n')
        # A link is followed: the library's content is stored at the path given.
        self.assertTrue(image.layer['lib/x/libdata.so.1'].isfile())
        self.assertEqual(image.content['lib/x/libdata.so.1'], b'some library\n')
        self.assertEqual(image.layer['usr/local/bin/tool'].mode, 0o755)
        self.assertEqual(image.layer['lib/x/libdata.so.1'].mode, 0o644)
        self.assertEqual(image.layer['tmp'].mode, 0o1777)
        for folder in ('usr', 'usr/local', 'usr/local/bin', 'lib', 'lib/x', 'tmp'):
            self.assertTrue(image.layer[folder].isdir(), folder)
        for m in image.layer.values():
            self.assertEqual((m.mtime, m.uid, m.gid, m.uname, m.gname), (0, 0, 0, '', ''), m.name)
        # The gzip header's MTIME (bytes 4-7) is 0 and it names no file (FLG bit 3 clear).
        self.assertEqual(image.layer_gz[4:8], b'\0\0\0\0')
        self.assertFalse(image.layer_gz[3] & 0x08)

    def test_building_again_gives_the_same_digest(self):
        first, _ = self.build('first.tar')
        os.utime(self.tool, (1, 1))  # another checkout's times change nothing
        second = self.mkimage('second.tar', '--entrypoint', '/usr/local/bin/tool',
                              '--dir', '/tmp:1777',
                              '--file', os.path.join(self.dir, 'data-link') + ':lib/x/libdata.so.1',
                              '--file', f'{self.tool}:usr/local/bin/tool')
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertEqual(Image(os.path.join(self.dir, 'second.tar')).manifest_digest,
                         first.manifest_digest)
        with open(os.path.join(self.dir, 'first.tar'), 'rb') as a, \
                open(os.path.join(self.dir, 'second.tar'), 'rb') as b:
            self.assertEqual(a.read(), b.read())
        changed, _ = self.build('changed.tar', '--env', 'MODE=other')
        self.assertNotEqual(changed.manifest_digest, first.manifest_digest)

    def test_a_missing_file_is_named_and_nothing_is_written(self):
        missing = os.path.join(self.dir, 'no-such-file')
        r = self.mkimage('image.tar', '--file', f'{missing}:/bin/x')
        self.assertEqual(r.returncode, 2)
        self.assertIn(f'{missing}: No such file or directory', r.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), ['data-link', 'data.txt', 'tool'])
        r = self.mkimage('image.tar', '--file', f'{self.tool}')
        self.assertEqual(r.returncode, 2)
        self.assertIn('expected SRC:DEST', r.stderr)

    def test_make_image_puts_the_binary_its_libraries_and_busybox(self):
        # /bin/true stands in for gpumux and for busybox: a dynamic binary found on any machine.
        binary = shutil.which('true')
        out = os.path.join(self.dir, 'gpumux-image.tar')
        env = dict(os.environ, BUSYBOX=binary, PYTHON=sys.executable, IMAGE='gpumux:test')
        r = subprocess.run(['sh', MAKE_IMAGE, binary, out], capture_output=True, text=True,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        image = Image(out)
        self.assertIn(f'{out}: gpumux:test', r.stdout)
        self.assertIn(image.manifest_digest, r.stdout)
        with open(os.path.realpath(binary), 'rb') as f:
            content = f.read()
        self.assertEqual(image.content['usr/local/bin/gpumux'], content)
        self.assertEqual(image.content['bin/busybox'], content)
        self.assertEqual(image.config['config']['Entrypoint'], ['/usr/local/bin/gpumux'])
        libs = subprocess.run(['ldd', binary], capture_output=True, text=True).stdout
        paths = [w for w in libs.split() if w.startswith('/')]
        self.assertTrue(paths, libs)
        for path in paths:
            with open(path, 'rb') as f:
                self.assertEqual(image.content[path.lstrip('/')], f.read(), path)
        self.assertIn('gpumux:x:65532:65532:', image.content['etc/passwd'].decode())
        stored = {n for n, m in image.layer.items() if m.isfile()}
        self.assertEqual(stored, {'usr/local/bin/gpumux', 'bin/busybox', 'etc/passwd',
                                  'etc/group'} | {p.lstrip('/') for p in paths})


if __name__ == '__main__':
    unittest.main(verbosity=2)
