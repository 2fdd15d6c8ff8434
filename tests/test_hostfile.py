"""Hostfile mistakes, one by one: each refusal names the file, the line and which mistake it is."""
import pytest

from suite.cluster import hostfile
from suite.cluster.hostfile import HostfileError

# text: (line at fault, what the one-line error must say)
MISTAKES = {
    "no_slots": ("node-a slots=8\nnode-b\n", 2, ["host node-b gives no slots", "needs slots=<N>"]),
    "bare_count": ("node-a 8\n", 1, ["a bare slot count", "write slots=8"]),
    "not_a_number": ("node-a slots=eight\n", 1, ["slots=eight is not a whole number", "in digits"]),
    "not_a_number_spaced": ("node-a slots = eight\n", 1, ["slots=eight is not a whole number"]),
    "trailing_comma": ("node-a slots=8,\n", 1, ["slots=8, is not a whole number"]),
    "max_slots_alone": ("node-a max_slots=8\n", 1, ["max_slots=8 but no slots", "add slots=<N>"]),
    "max_slots_below": ("node-a slots=8 max_slots=4\n", 1, ["slots=8 above max_slots=4"]),
    "gpus_keyword": ("node-a gpus=8\n", 1, ["unknown setting 'gpus'", "slots=<N>"]),
    "other_keyword": ("node-a slots=8 cpus_per_task=4\n", 1, ["unknown setting 'cpus_per_task'",
                                                              "max_slots=<M> only"]),
    "stray_word": ("node-a slots=8 gpu\n", 1, ["'gpu' is not a setting"]),
    "host_list_form": ("node-a:8\n", 1, ["node-a:N is the -H form", "'<host> slots=<N>'"]),
    "zero_slots": ("node-a slots=0\n", 1, ["slots=0", "must be positive", "deleting its line"]),
    "negative_slots": ("node-a slots=-2\n", 1, ["slots=-2", "must be positive"]),
    "slots_twice": ("node-a slots=8 slots=4\n", 1, ["slots given twice"]),
    "duplicate_host": ("node-a slots=4\n# a comment\nNode-A slots=4\n", 3,
                       ["duplicate host Node-A (first on line 1)", "one line with all its slots"]),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_each_mistake_is_named_with_file_and_line(case, tmp_path):
    text, line, culprits = MISTAKES[case]
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(HostfileError) as caught:
        hostfile.parse(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert "\n" not in message
    for culprit in culprits:
        assert culprit in message, message


def test_open_mpi_forms_are_read(tmp_path):
    """What Open MPI itself takes is not a mistake: spaces round '=', max_slots, comments, tabs."""
    path = tmp_path / "hosts"
    path.write_text("# cluster\nnode-a slots = 8\nnode-b\tslots=8  max_slots=8  # full\n\nnode-c\n")
    hosts = hostfile.parse(str(path), default_slots=4)
    found = [(h.name, h.slots, h.line) for h in hosts]
    assert found == [("node-a", 8, 2), ("node-b", 8, 3), ("node-c", 4, 5)]


def test_an_empty_file_and_a_missing_one(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# nothing yet\n\n")
    with pytest.raises(HostfileError, match="no hosts; expected lines of the form"):
        hostfile.parse(str(path))
    with pytest.raises(HostfileError, match="No such file"):
        hostfile.parse(str(tmp_path / "missing"))
