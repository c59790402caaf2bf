#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/ from the project's real inputs.

Sources: ../shared/k8s-samples (request bodies captured from kube-scheduler v1.20 and v1.32),
the embedded Alibaba trace and workload profile (data/), and the reliability reproducers
(tests/repros/). Run from the project root; it only adds or overwrites seed-* files, so the
inputs that libFuzzer found and that were checked in beside them stay.
"""
import glob
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, 'fuzz', 'corpus')
SAMPLES = os.path.join(ROOT, '..', 'shared', 'k8s-samples')
REPROS = os.path.join(ROOT, 'tests', 'repros')
SEP = b'\n--8<--\n'


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def seed(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, 'seed-' + name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def head(path, lines):
    with open(path, 'rb') as f:
        return b''.join(f.readline() for _ in range(lines))


def main():
    # extender_verbs: verb byte (0 filter, 1 prioritize, 2 bind, 3 preempt) + body.
    verbs = {'filter': 0, 'prioritize': 1, 'bind': 2, 'preempt': 3}
    for path in sorted(glob.glob(os.path.join(SAMPLES, '*', '*.request.json'))):
        version = os.path.basename(os.path.dirname(path))
        verb = os.path.basename(path).split('.')[0]
        seed('extender_verbs', f'{version}-{verb}', bytes([verbs[verb]]) + read(path))
    for body in ('filter.json', 'filter-wrong-node.json'):
        seed('extender_verbs', 'repro-' + body,
             b'\0' + read(os.path.join(REPROS, 'extender-nodes-empty-object', body)))

    # k8s_objects: 0 node, 1 pod, 2 grant, 3 node lock, 4 quantity, 5 RFC 3339, 6 lock view.
    nodes = json.load(open(os.path.join(SAMPLES, 'v1.32.13-nodeCacheCapable-false',
                                        'filter.request.json')))
    for i, node in enumerate(nodes['Nodes']['items'][:2]):
        seed('k8s_objects', f'node-{i}', b'\0' + json.dumps(node).encode())
        seed('k8s_objects', f'lockview-{i}', b'\6' + json.dumps(node).encode())
    repro_nodes = json.load(open(os.path.join(REPROS, 'extender-nodes-empty-object', 'nodes.json')))
    seed('k8s_objects', 'node-gpumux', b'\0' + json.dumps(repro_nodes['items'][0]).encode())
    seed('k8s_objects', 'node-cpu-overflow',
         b'\0' + json.dumps(json.load(open(os.path.join(
             REPROS, 'extender-nodelist-cpu-overflow', 'nodes.json')))['items'][0]).encode())
    seed('k8s_objects', 'pod', b'\1' + json.dumps(nodes['Pod']).encode())
    grant = {'version': 1, 'node': 'n1', 'policy': 'fgd', 'assumedAt': '2026-11-23T10:00:00Z',
             'containers': [{'name': 'c', 'gpus': [{'index': 0, 'uuid': 'GPU-a'}],
                             'gpuMilli': 500, 'gpuMemMiB': 8192, 'milliRequested': True}]}
    seed('k8s_objects', 'grant', b'\2' + json.dumps(grant).encode())
    lock = {'version': 1, 'pod': 'default/p', 'uid': 'u1', 'since': '2026-11-23T10:00:00Z',
            'served': ['c/gpumux.io/gpu']}
    seed('k8s_objects', 'lock', b'\3' + json.dumps(lock).encode())
    for i, q in enumerate(['100m', '1.5Gi', '9223372036854775807', '1e3', '0.001']):
        seed('k8s_objects', f'quantity-{i}', b'\4' + q.encode())
    seed('k8s_objects', 'time', b'\5' + b'2026-11-23T10:00:00.123456Z')

    # admission_review: what the API server sends gpumux webhook, one pod per GPU stack.
    def review(name, limits, annotations=None):
        pod = {'apiVersion': 'v1', 'kind': 'Pod',
               'metadata': {'name': name, 'namespace': 'team-a'},
               'spec': {'schedulerName': 'default-scheduler',
                        'containers': [{'name': 'main', 'image': 'cuda',
                                        'resources': {'limits': limits}}]}}
        if annotations:
            pod['metadata']['annotations'] = annotations
        seed('admission_review', name, json.dumps({
            'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
            'request': {'uid': 'u-' + name, 'kind': {'group': '', 'version': 'v1', 'kind': 'Pod'},
                        'operation': 'CREATE', 'namespace': 'team-a', 'object': pod}}))
    review('nvidia', {'nvidia.com/gpu': '2'})
    review('hami', {'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '3k', 'nvidia.com/gpucores': '30'})
    review('gpushare', {'aliyun.com/gpu-mem': '4'})
    review('kai', {'cpu': '1'}, {'gpu-fraction': '0.5'})
    review('refused', {'nvidia.com/gpumem-percentage': '50'})

    # kubeconfig: a token and a client-certificate user (no real credentials).
    seed('kubeconfig', 'token', '''apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: gpu}
users:
- name: u
  user:
    token: abc
''')
    seed('kubeconfig', 'files', '''apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c
  cluster: {server: "https://[::1]:6443", certificate-authority: ca.crt}
contexts:
- {name: ctx, context: {cluster: c, user: u}}
users:
- {name: u, user: {client-certificate: c.crt, client-key: c.key, tokenFile: token}}
''')

    # oci_bundle: path byte + state + config.json + ledger.
    config = {'ociVersion': '1.0.2', 'process': {'env': ['HOUDINI_GPU_REQUESTED=1'], 'args': ['sh']},
              'root': {'path': 'rootfs'}, 'linux': {'devices': [], 'resources': {'devices': []}},
              'annotations': {'io.kubernetes.cri.sandbox-namespace': 'default',
                              'io.kubernetes.cri.sandbox-name': 'p',
                              'io.kubernetes.cri.container-name': 'c'}}
    state = json.dumps({'ociVersion': '1.0.2', 'id': 'c1', 'status': 'creating', 'pid': 1,
                        'bundle': '/b'}).encode()
    ledger = read(os.path.join(REPROS, 'hook-ledger-gpu-out-of-range', 'reservations-gpu2.json'))
    for path in (0, 1):
        seed('oci_bundle', f'{path}-reserve', bytes([path]) + state + SEP + json.dumps(config).encode())
        seed('oci_bundle', f'{path}-ledger-gpu2', bytes([path]) + state + SEP +
             json.dumps(config).encode() + SEP + ledger)
        seed('oci_bundle', f'{path}-root-type', bytes([path]) + state + SEP +
             read(os.path.join(REPROS, 'hook-config-root-type', 'bundle', 'config.json')))
        seed('oci_bundle', f'{path}-linux-type', bytes([path]) + state + SEP +
             read(os.path.join(REPROS, 'oci-runtime-config-type', 'config.json')))
        listed = json.loads(json.dumps(config))
        listed['process']['env'] = ['NVIDIA_VISIBLE_DEVICES=GPU-b,0']
        seed('oci_bundle', f'{path}-listed', bytes([path]) + state + SEP + json.dumps(listed).encode())

    # hook_ledger
    for path in glob.glob(os.path.join(REPROS, 'hook-ledger-gpu-out-of-range', 'reservations*.json')):
        seed('hook_ledger', os.path.basename(path), read(path))
    seed('hook_ledger', 'two', json.dumps({'version': 1, 'reservations': [
        {'container': 'a', 'gpus': [0], 'since': '2026-01-01T00:00:00Z', 'since_unix': 1,
         'state': 'running', 'holder_pid': 1, 'holder_start_time': 1,
         'holder_pid_ns': 'pid:[4026531836]', 'pod': 'default/p/c'},
        {'container': 'b', 'gpus': [1], 'since': '2026-01-01T00:00:00Z', 'since_unix': 1,
         'state': 'pending', 'holder_pid': 999999, 'holder_start_time': 5}]}))

    # gpu_file
    for repro in ('hook-ledger-gpu-out-of-range', 'device-plugin-huge-memory', 'oci-runtime-config-type'):
        seed('gpu_file', repro, read(os.path.join(REPROS, repro, 'gpus.csv')))
    seed('gpu_file', 'health', 'index,uuid,model,memory_mib,minor,health\n'
         '0,GPU-0,NVIDIA A100-SXM4-80GB,81920,0,Healthy\n1,GPU-1,NVIDIA A100-SXM4-80GB,81920,1,Unhealthy\n')

    # trace_csv: 0 node list, 1 pod list.
    seed('trace_csv', 'nodes', b'\0' + head(os.path.join(ROOT, 'data', 'openb_node_list_gpu_node.csv'), 40))
    seed('trace_csv', 'pods', b'\1' + head(os.path.join(ROOT, 'data', 'openb_pod_list_default.csv'), 60))
    seed('trace_csv', 'nodes-cpu-overflow', b'\0' + read(os.path.join(REPROS, 'simulate-node-cpu-overflow', 'nodes.csv')))
    seed('trace_csv', 'pods-tiny', b'\1' + read(os.path.join(REPROS, 'simulate-tiny-pod-resample', 'pods.csv')))

    # replay: arrival.csv + nodes.csv of the replay reproducers (same nodes and pods as fuzz/data).
    for repro in ('replay-duplicate-arrival', 'replay-gpu-index-overflow'):
        d = os.path.join(REPROS, repro, 'replay')
        seed('replay', repro, read(os.path.join(d, 'arrival.csv')) + SEP + read(os.path.join(d, 'nodes.csv')))

    # dl_jobs and workload_profile
    seed('dl_jobs', 'submit-overflow', read(os.path.join(REPROS, 'dl-jobs-submit-overflow', 'jobs.csv')))
    seed('dl_jobs', 'tiny-rate', read(os.path.join(REPROS, 'jobgen-tiny-rate', 'jobs.csv')))
    seed('dl_jobs', 'mix', 'job,class,submit_s,gpu_mib\nj1,resnet50,0,8192\nj2,vgg16,12.5,4096\n'
         'j3,lstm,30.000001,6144\nj4,neumf,31,3072\n')
    seed('workload_profile', 'default', read(os.path.join(ROOT, 'data', 'dl_profile_iadeep_fitted.json')))
    for path in glob.glob(os.path.join(REPROS, 'dl-profile-overflow', '*.json')):
        seed('workload_profile', os.path.basename(path), read(path))

    # allocate: resource byte + grant byte + AllocateRequest. Hand-encoded protobuf:
    # AllocateRequest{container_requests (1): ContainerAllocateRequest{devices_ids (1): "..."}}.
    def container(ids):
        inner = b''.join(b'\x0a' + bytes([len(i)]) + i.encode() for i in ids)
        return b'\x0a' + bytes([len(inner)]) + inner
    seed('allocate', 'gpu', b'\0\x81' + container(['GPU-1']))
    seed('allocate', 'gpu-mem', b'\1\x02' + container(['GPU-2-m0', 'GPU-2-m1']) + container(['GPU-3-m5']))
    seed('allocate', 'gpu-milli', b'\2\x43' + container(['GPU-0-c%d' % k for k in range(5)]))
    seed('allocate', 'wrong-resource', b'\0\x00' + container(['GPU-0-m0']))
    seed('allocate', 'repeated', b'\0\x00' + container(['GPU-0', 'GPU-0']))

    # manifests: the deploy examples (YAML, several documents); the seeds made from
    # `gpumux jobgen --format k8s` output (seed-jobgen-*, seed-openb-*, seed-list.json) were
    # written by hand with the binary and are kept.
    for path in sorted(glob.glob(os.path.join(ROOT, 'deploy', 'examples', '*.yaml'))):
        seed('manifests', 'example-' + os.path.basename(path), read(path))
    # run_record: the head of the example record of `gpumux submit`.
    seed('run_record', 'record', head(os.path.join(ROOT, 'examples', 'cluster-run',
                                                   'record.jsonl'), 12))

    # coordinator: a store file, then the job protocol's requests, one per line with its
    # caller (fuzz/coordinator.cc): the reproducers' stores, and a session of two jobs on one
    # GPU with an impersonation attempt and a phantom job.
    session = '\n'.join([
        'a POST /v1/register {"job":"ns/p1/c","class":"vgg16","batch_size":64,"gpus":["GPU-a"]}',
        'b POST /v1/register {"job":"ns/p2/c","class":"resnet152","batch_size":32,'
        '"gpus":["GPU-a"],"max_batch":128}',
        'b POST /v1/register {"job":"ns/p1/c","class":"vgg16","batch_size":64,"gpus":["GPU-a"],'
        '"max_batch":1}',
        'a POST /v1/report {"job":"ns/p1/c","steps":[[64,0.2],[64,0.21]]}',
        'b POST /v1/report {"job":"ns/p2/c","steps":[[32,0.3],[32,0.31]],"noise_scale":2}',
        'a POST /v1/report {"job":"ns/p1/c","steps":[[64,0.2],[64,0.21],[64,0.2]]}',
        'b POST /v1/report {"job":"ns/p2/c","steps":[[32,0.3],[32,0.31],[32,0.3]]}',
        't POST /v1/register {"job":"x/y/z","class":"squeezenet","batch_size":64,"gpus":["GPU-b"]}',
        'p POST /v1/leave {"job":"ns/p1/c"}',
        'a GET /v1/state',
        'b POST /v1/leave {"job":"ns/p2/c"}', ''])
    for path in sorted(glob.glob(os.path.join(REPROS, 'coordinator-store-gpu-entry-type', '*.json'))):
        seed('coordinator', os.path.basename(path), read(path) + SEP + session.encode())
    seed('coordinator', 'empty-store', SEP + session.encode())
    # A stored job whose seen is INT64_MIN: the first report's arithmetic overflowed (review).
    seed('coordinator', 'negative-seen', json.dumps({'version': 1, 'revision': 1, 'keys': {
        '/gpumux/nodes/n1/jobs/ns%2Fp1%2Fc': {'revision': 1, 'value': json.dumps({
            'job': 'ns/p1/c', 'class': 'vgg16', 'batch_size': 64, 'gpus': ['GPU-a'],
            'seen': -9223372036854775808})}}}).encode() + SEP +
         b'n POST /v1/report {"job":"ns/p1/c","steps":[[64,0.2]]}\n')

    # Deep nesting, past core::kMaxJsonDepth (128) and within -max_len: a value 129, 200 and
    # 1,000 levels deep where each reader takes one.
    def deep(levels):
        return '[' * levels + ']' * levels
    for levels in (129, 200, 1000):
        seed('admission_review', f'deep-{levels}', json.dumps({
            'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
            'request': {'uid': 'u', 'operation': 'CREATE', 'object': '@'}}).replace('"@"',
                                                                                 deep(levels)))
        seed('extender_verbs', f'deep-{levels}',
             b'\0' + ('{"Pod":{"metadata":{"name":"p"},"spec":' + deep(levels) +
                       '},"NodeNames":["n1"]}').encode())
        seed('coordinator', f'deep-{levels}', SEP +
             f'a POST /v1/register {{"job":"ns/p/c","class":{deep(levels)}}}\n'.encode())

    # http_framing: what a client sends on one connection (fuzz/http_framing.cc).
    http = {
        'get': 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
        'pipelined': 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' * 3 +
                     'GET /side HTTP/1.1\r\nHost: y\r\n\r\n',
        'post': 'POST /echo?a=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello',
        'large-body': 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n' +
                      'b' * 3000,
        'too-large': 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n',
        'chunked': 'POST /compute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                   '5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n',
        'chunked-large': 'POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n' +
                         '400\r\n' + 'c' * 1024 + '\r\n' + '400\r\n' + 'd' * 1024 +
                         '\r\n0\r\n\r\n',
        'long-extension': 'POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                          '1;' + 'e' * 3000 + '\r\nx\r\n0\r\n\r\n',
        'continue': 'POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n'
                    'Content-Length: 4\r\n\r\nabcd',
        'head': 'HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
        'http10': 'GET /healthz HTTP/1.0\r\n\r\n',
        'bad-method': 'DELETE /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\n\r\n',
        'not-http': '\x16\x03\x01\x00\xa5\x01\x00\x00',
        'both-lengths': 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n'
                        'Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
    }
    for name, text in http.items():
        seed('http_framing', name, text.encode('latin-1'))


if __name__ == '__main__':
    main()
