"""The unlabelled IMDB reviews as pretraining documents, on tiny archives and
trees of the real layout made by the tests: sentence splitting, the order of
the reviews, the three places they come from (the data root, the mirror,
the download), and the refusal of damaged or unsafe archives."""
import hashlib
import io
import shutil
import tarfile

import pytest

from graphseq.data import imdb
from graphseq.data.files import Checksum
from graphseq.data.imdb import load_imdb_unsup, review_sentences
from graphseq.errors import GraphseqError
from graphseq.pipeline import data_places

# Ids 0..11, so that the order by name (0, 1, 10, 11, 2, ...) is not the order by id.
REVIEWS = {f"{i}_0.txt": f"Review {i} starts here. It ends here!<br /><br />Tom &amp; Jerry&#39;s cameo."
           for i in range(12)}


def write_tree(base, reviews=REVIEWS):
    """An extracted ``aclImdb`` with the unlabelled ``reviews`` under ``base``."""
    folder = base / "aclImdb" / "train" / "unsup"
    folder.mkdir(parents=True)
    for name, text in reviews.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def add(archive, name, data=b"", kind=tarfile.REGTYPE, link=""):
    member = tarfile.TarInfo(name)
    member.type, member.linkname, member.size = kind, link, len(data)
    archive.addfile(member, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def write_archive(path, reviews=REVIEWS, extra=()):
    """A ``.tar.gz`` of the real layout: labelled reviews and a README
    beside the unlabelled ones, which alone are to be unpacked."""
    with tarfile.open(path, "w:gz") as archive:
        add(archive, "aclImdb", kind=tarfile.DIRTYPE)
        add(archive, "aclImdb/README", b"Large Movie Review Dataset v1.0")
        add(archive, "aclImdb/train/pos/0_9.txt", b"A labelled review.")
        for name, text in reviews.items():
            add(archive, f"aclImdb/train/unsup/{name}", text.encode())
        for args in extra:
            add(archive, *args)
    return path


def checksum(path):
    return Checksum(hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size)


@pytest.fixture
def serve(monkeypatch, tmp_path):
    """Stands in for Stanford: the download copies the archive given (and
    the known checksum becomes its own); returns the list of downloads."""
    downloads = []

    def serve(archive, known=None):
        def download_url(url, path):
            downloads.append(url)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(archive, path)

        monkeypatch.setattr(imdb, "download_url", download_url)
        monkeypatch.setitem(imdb.CHECKSUMS, imdb.ARCHIVE, known or checksum(archive))
        return downloads

    return serve


def tree(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) if folder.exists() else None


def test_line_breaks_entities_and_sentence_ends_split_a_review():
    text = ('I loved it. "Great" film!<br /><br />Tom &amp; Jerry&#39;s cameo... was odd? yes.  It was (sort of.) '
            "Fine.<br>Mr. Smith&nbsp;agrees.")
    assert review_sentences(text) == ["I loved it.", '"Great" film!', "Tom & Jerry's cameo... was odd? yes.",
                                      "It was (sort of.)", "Fine.", "Mr.", "Smith agrees."]


def test_the_mirror_tree_is_read_where_it_lies_in_the_order_of_the_ids(tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_tree(mirror)
    before = tree(mirror)
    documents = load_imdb_unsup(root, mirror)
    assert [doc[0] for doc in documents] == [f"Review {i} starts here." for i in range(12)]
    assert documents[0] == ["Review 0 starts here.", "It ends here!", "Tom & Jerry's cameo."]
    assert tree(mirror) == before and not root.exists()  # nothing copied, nothing written


def test_the_archive_is_downloaded_and_only_the_unlabelled_reviews_unpacked(tmp_path, serve):
    downloads = serve(write_archive(tmp_path / "served.tar.gz"))
    root = tmp_path / "root"
    documents = load_imdb_unsup(root, None)
    assert downloads == [imdb.URL] and len(documents) == 12
    # The archive went once unpacked; no labelled review, README or temporary folder is left.
    assert tree(root / "aclImdb") == ["train", "train/unsup"] + sorted(f"train/unsup/{n}" for n in REVIEWS)
    assert load_imdb_unsup(root, None) == documents and len(downloads) == 1  # read from the root now


def test_the_mirrors_archive_is_unpacked_into_the_root_and_the_mirror_left_as_it_was(tmp_path, serve):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    (mirror / "aclImdb").mkdir(parents=True)
    downloads = serve(write_archive(mirror / "aclImdb" / imdb.ARCHIVE))
    before = tree(mirror)
    assert len(load_imdb_unsup(root, mirror)) == 12
    assert downloads == [] and tree(mirror) == before
    assert sorted(p.name for p in (root / "aclImdb").iterdir()) == ["train"]  # its copy was removed


def test_an_archive_the_user_put_in_the_root_is_kept(tmp_path, serve):
    root = tmp_path / "root"
    (root / "aclImdb").mkdir(parents=True)
    serve(write_archive(root / "aclImdb" / imdb.ARCHIVE))
    assert len(load_imdb_unsup(root, None)) == 12
    assert sorted(p.name for p in (root / "aclImdb").iterdir()) == [imdb.ARCHIVE, "train"]


def test_a_truncated_archive_in_the_root_is_refused_by_name(tmp_path, serve):
    good = write_archive(tmp_path / "good.tar.gz")
    serve(good)
    root = tmp_path / "root"
    (root / "aclImdb").mkdir(parents=True)
    archive = root / "aclImdb" / imdb.ARCHIVE
    archive.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(GraphseqError) as refused:
        load_imdb_unsup(root, None)
    assert str(refused.value).startswith(f"damaged dataset file {archive} (in the data root; delete it to fetch it "
                                         f"again): {archive.stat().st_size:,} bytes where a good copy has")
    assert "\n" not in str(refused.value)
    assert tree(root) == ["aclImdb", f"aclImdb/{imdb.ARCHIVE}"]  # the user's file kept, nothing unpacked


def test_a_download_that_is_no_whole_archive_is_named_and_removed(tmp_path, serve):
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(write_archive(tmp_path / "good.tar.gz").read_bytes()[:-100])
    serve(damaged)  # the checksum known is the damaged file's, so only reading it finds the damage
    root = tmp_path / "root"
    with pytest.raises(GraphseqError) as refused:
        load_imdb_unsup(root, None)
    message = str(refused.value)
    assert message.startswith(f"damaged IMDB file {root / 'aclImdb' / imdb.ARCHIVE}: it is not a whole .tar.gz "
                              f"archive (")
    assert message.endswith("it was removed, run again to fetch it") and "\n" not in message
    assert not root.exists()  # no archive, no half-unpacked folder, no empty folder


@pytest.mark.parametrize("member,why", [
    (("aclImdb/../../escaped.txt", b"out"), "its path leads outside the folder it is unpacked into"),
    (("/tmp/absolute.txt", b"out"), "its path leads outside the folder it is unpacked into"),
    (("aclImdb/train/unsup/12_0.txt", b"", tarfile.SYMTYPE, "/etc/passwd"), "it is a link or a device"),
])
def test_an_unsafe_member_refuses_the_archive(tmp_path, serve, member, why):
    archive = write_archive(tmp_path / "served.tar.gz", extra=[member])
    serve(archive)
    root = tmp_path / "work" / "root"
    root.parent.mkdir()
    with pytest.raises(GraphseqError, match=f"refusing {root / 'aclImdb' / imdb.ARCHIVE}: its member "
                                            f"'{member[0]}' is unsafe to unpack \\({why}"):
        load_imdb_unsup(root, None)
    assert tree(tmp_path / "work") == []  # no root left, nothing written beside it
    assert not list(tmp_path.rglob("escaped.txt")) and not list(tmp_path.rglob("absolute.txt"))


def test_a_review_missing_from_the_numbering_is_named(tmp_path):
    mirror = tmp_path / "mirror"
    folder = write_tree(mirror)
    (folder / "5_0.txt").unlink()
    with pytest.raises(GraphseqError, match=f"{folder} lacks review 5 \\(it holds 6_0.txt next, and 11 reviews "
                                            f"in all\\); restore it"):
        load_imdb_unsup(tmp_path / "root", mirror)


def test_a_review_that_is_not_utf8_is_named(tmp_path):
    folder = write_tree(tmp_path / "root")
    (folder / "3_0.txt").write_bytes(b"Caf\xe9 society.")
    with pytest.raises(GraphseqError, match=f"damaged IMDB review {folder / '3_0.txt'}: not UTF-8 text"):
        load_imdb_unsup(tmp_path / "root", None)


def test_a_read_only_root_reads_its_reviews_and_refuses_to_unpack(tmp_path, serve, deny_writes):
    root, mirror = tmp_path / "root", tmp_path / "mirror"
    write_tree(root)
    deny_writes(root)
    assert len(load_imdb_unsup(root, None)) == 12
    shutil.rmtree(root / "aclImdb")
    (mirror / "aclImdb").mkdir(parents=True)
    serve(write_archive(mirror / "aclImdb" / imdb.ARCHIVE))
    with pytest.raises(GraphseqError, match=f"cannot unpack the IMDB reviews: {root} is not writable"):
        load_imdb_unsup(root, mirror)
    assert tree(root) == []


def test_a_mirror_in_the_roots_imdb_folder_is_refused(tmp_path):
    root = tmp_path / "root"
    write_tree(root)
    with pytest.raises(GraphseqError, match="aclImdb"):
        data_places(root, root / "aclImdb")
