"""One image's registry reads share one deadline (inputs/image.image_registry_options)."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.image import image_registry_options
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import Deadline


def test_registry_deadline_becomes_one_deadline_for_the_images_clients():
    options = image_registry_options({"registry_deadline": 10, "registry_plain_http": True, "registry_timeout": 5})
    assert isinstance(options["deadline"], Deadline) and options["deadline"].seconds == 10
    assert 9 < options["deadline"].remaining() <= 10
    options["deadline"].cancel()
    assert "deadline" not in image_registry_options({"registry_plain_http": True})
