"""The cache_refusals filter: kubernetes.core's dry-run errors to one line per refused declared cache."""

import json

from ansible_collections.gkm.cluster.plugins.filter.cache_refusals import cache_refusals

STATUS = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
          "message": 'GKMCache.gkm.io "x" is invalid: spec.image: Required value'}


def cache(name, namespace="team-a"):
    return {"kind": "GKMCache", "metadata": {"name": name, "namespace": namespace}}


def failed(body):
    # What kubernetes.core puts in an error's msg: the exception body, a bytes repr.
    return {"changed": False, "result": {}, "error": {"msg": "Failed to create object: %r" % body,
                                                      "reason": "Unprocessable Entity"}}


def test_every_refused_cache_is_named_with_the_server_message():
    results = {"result": {"results": [failed(json.dumps(STATUS).encode()), {"changed": True, "result": {}},
                                      failed(json.dumps(dict(STATUS, message='has "quotes"')).encode())]}}
    assert cache_refusals([cache("x"), cache("ok"), cache("y")], results) == [
        'GKMCache team-a/x: GKMCache.gkm.io "x" is invalid: spec.image: Required value',
        'GKMCache team-a/y: has "quotes"']


def test_one_declared_cache_and_an_unparsable_error():
    assert cache_refusals([cache("x")], failed(json.dumps(STATUS).encode())) == [
        'GKMCache team-a/x: GKMCache.gkm.io "x" is invalid: spec.image: Required value']
    # Newer clients put the body in the message as text.
    as_text = {"error": {"msg": "Failed to create object: %s\n" % json.dumps(STATUS)}}
    assert cache_refusals([cache("x")], as_text) == [
        'GKMCache team-a/x: GKMCache.gkm.io "x" is invalid: spec.image: Required value']
    # A name ending in b puts b" inside the JSON text: no bytes literal for all that.
    named_b = dict(STATUS, message='GKMCache.gkm.io "no-image-5441b" is invalid', details={"name": "no-image-5441b"})
    as_text = {"error": {"msg": "Failed to create object: %s\n" % json.dumps(named_b, separators=(",", ":"))}}
    assert cache_refusals([cache("no-image-5441b")], as_text) == [
        'GKMCache team-a/no-image-5441b: GKMCache.gkm.io "no-image-5441b" is invalid']
    odd = {"error": {"msg": "namespaces \"team-z\" not found"}}
    assert cache_refusals([{"kind": "ClusterGKMCache", "metadata": {"name": "c"}}], odd) == [
        'ClusterGKMCache c: namespaces "team-z" not found']
    assert cache_refusals([cache("ok")], {"changed": True, "result": {}}) == []
