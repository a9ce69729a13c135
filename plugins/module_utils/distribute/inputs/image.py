# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The image side of a reconcile's inputs (I/O: the registry): the image option resolved to a digest and its cache
labels, the registry access and public key the Jobs get, and the validated CacheSpec pinned to that digest."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import (
    image_signature,
    registry_secret,
    verification,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import (
    SpecError,
    cache_spec_from_params,
    extract_limit_args,
    pin_image,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import registry_options
from ansible_collections.gkm.cluster.plugins.module_utils.oci.metadata import CacheMetadataError, parse_cache_metadata
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import (
    Deadline,
    OCIError,
    credentials_for,
    fetch_image_config,
    parse_reference,
)


def resolve_image(params, options):
    """(digest-pinned reference, digest, cache metadata) of the image option; tags are resolved now. options: the
    registry clients' (image_registry_options)."""
    image = params["image"]
    try:
        container = parse_reference(image)
        digest, config = fetch_image_config(image, **options)
        metadata = parse_cache_metadata(config)
    except (OCIError, CacheMetadataError) as error:
        raise DistributeError("image %s: cannot resolve its digest and cache labels: %s" % (image, error),
                              reason="ImageUnresolvable") from error
    return "%s/%s@%s" % (container.registry, container.api_prefix, digest), digest, metadata


def image_registry_options(params):
    """The registry options of one image's reads: registry_deadline is one Deadline for all of them (the tag's
    resolve and the signature check), not one per client."""
    options = registry_options(params)
    if "deadline" in options:
        options["deadline"] = Deadline(options["deadline"])
    return options


def extractor_registry_args(params):
    args = []
    if params.get("registry_plain_http"):
        args.append("--plain-http")
    if params.get("registry_validate_certs") is False:
        args.append("--insecure-skip-tls-verify")
    return args


def _read_option_file(params, option):
    path = params.get(option)
    if not path:
        return None
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as error:
        raise DistributeError("%s %s cannot be read: %s" % (option, path, error.strerror)) from error


def registry_files(params, image_ref, verify=None):
    """What the Jobs get of the registry options, for the image's registry, and the public key they verify
    with ({} when they need nothing)."""
    host = parse_reference(image_ref).registry
    username, password = params.get("registry_username"), params.get("registry_password")
    if username and not credentials_for(host, params.get("registry_host")):
        username = password = None
    try:
        files = registry_secret.secret_data(
            host, username, password,
            _read_option_file(params, "registry_docker_config"), _read_option_file(params, "registry_ca_file"))
    except registry_secret.RegistrySecretError as error:
        raise DistributeError(str(error)) from error
    if verify is not None:
        files[verification.PUBLIC_KEY_FILE] = verify[1]
    return files


def build_spec(params):
    """The validated CacheSpec, pinned to the image digest when the cache is to be present."""
    verify = verification.job_verification(params) if params.get("state", "present") == "present" else None
    fields = dict(params, verification=verify, extract_args=extractor_registry_args(params) + (
        verification.extractor_args(verify, registry_secret.MOUNT_PATH)))
    try:
        spec = cache_spec_from_params(fields)
        spec.extract_args.extend(extract_limit_args(spec.extract_limits))
        if spec.state == "present":
            if not params.get("image"):
                raise SpecError("image is required with state: present")
            options = image_registry_options(params)
            image_ref, digest, metadata = resolve_image(params, options)
            if spec.image_volume and verify is not None:
                # No Job verifies in this mode: the digest is checked before the status records it.
                image_signature.verify(params, image_ref, digest, verify, options)
            pin_image(spec, image_ref, digest, metadata, registry_files(params, image_ref, verify))
    except SpecError as error:
        raise DistributeError(str(error), reason="InvalidSpec") from error
    return spec
