"""The IMDB reviews as pretraining documents, on tiny archives and trees of
the real layout made by the tests: sentence splitting, the order of the
reviews (the unlabelled ones, and the training ones negative then
positive), the three places they come from (the data root, the mirror, the
download), the parts unpacked together or one after the other, and the
refusal of damaged or unsafe archives and of incomplete folders."""
import hashlib
import io
import shutil
import tarfile

import pytest

from graphseq.data import imdb
from graphseq.data.files import Checksum
from graphseq.data.imdb import NEG, POS, UNSUP, load_imdb_parts, load_imdb_train, load_imdb_unsup, review_sentences
from graphseq.errors import GraphseqError
from graphseq.data.places import data_places

# Ids 0..11, so that the order by name (0, 1, 10, 11, 2, ...) is not the order by id.
REVIEWS = {f"{i}_0.txt": f"Review {i} starts here. It ends here!<br /><br />Tom &amp; Jerry&#39;s cameo."
           for i in range(12)}
# The labelled training reviews, rated 1-4 (negative) and 7-10 (positive); ids 0..10 for the same reason.
NEG_REVIEWS = {f"{i}_{1 + i % 4}.txt": f"Negative {i}. A dull film." for i in range(11)}
POS_REVIEWS = {f"{i}_{7 + i % 4}.txt": f"Positive {i}. A fine film." for i in range(11)}
TRAIN_FIRST_SENTENCES = [f"Negative {i}." for i in range(11)] + [f"Positive {i}." for i in range(11)]


def write_tree(base, reviews=REVIEWS, part="unsup"):
    """An extracted ``aclImdb`` with the ``reviews`` of ``train/<part>`` under ``base``."""
    folder = base / "aclImdb" / "train" / part
    folder.mkdir(parents=True)
    for name, text in reviews.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def add(archive, name, data=b"", kind=tarfile.REGTYPE, link=""):
    member = tarfile.TarInfo(name)
    member.type, member.linkname, member.size = kind, link, len(data)
    archive.addfile(member, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def write_archive(path, reviews=REVIEWS, extra=(), train=True):
    """A ``.tar.gz`` of the real layout: the unlabelled reviews, the
    labelled training ones (positive first, unless ``train`` is false), and
    a test review, a README and a bag-of-words file, which are never to be
    unpacked."""
    labelled = [("pos", POS_REVIEWS), ("neg", NEG_REVIEWS)] if train else []
    with tarfile.open(path, "w:gz") as archive:
        add(archive, "aclImdb", kind=tarfile.DIRTYPE)
        add(archive, "aclImdb/README", b"Large Movie Review Dataset v1.0")
        add(archive, "aclImdb/test/pos/0_9.txt", b"A test review.")
        add(archive, "aclImdb/train/labeledBow.feat", b"9 0:9 1:1")
        for folder, texts in labelled[:1] + [("unsup", reviews)] + labelled[1:]:
            for name, text in texts.items():
                add(archive, f"aclImdb/train/{folder}/{name}", text.encode())
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


def part_tree(*parts):
    """What ``tree(root / "aclImdb")`` holds once ``parts`` are unpacked."""
    files = {"unsup": REVIEWS, "neg": NEG_REVIEWS, "pos": POS_REVIEWS}
    return sorted(["train"] + [f"train/{p}" for p in parts] + [f"train/{p}/{n}" for p in parts for n in files[p]])


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
    assert tree(root / "aclImdb") == part_tree("unsup")
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


# --------------------------------------------------------------------------- #
# The labelled training reviews (their text)
# --------------------------------------------------------------------------- #

def test_the_training_reviews_are_the_negative_then_the_positive_ones_each_by_id(tmp_path):
    mirror = tmp_path / "mirror"
    write_tree(mirror, POS_REVIEWS, "pos")
    write_tree(mirror, NEG_REVIEWS, "neg")
    before = tree(mirror)
    documents = load_imdb_train(tmp_path / "root", mirror)
    assert [doc[0] for doc in documents] == TRAIN_FIRST_SENTENCES
    assert documents[13] == ["Positive 2.", "A fine film."]
    assert tree(mirror) == before and not (tmp_path / "root").exists()  # read where they lie


def test_one_download_and_one_pass_over_the_archive_unpack_every_part_asked_for(tmp_path, serve, monkeypatch):
    downloads = serve(write_archive(tmp_path / "served.tar.gz"))
    opened = []
    real_open = tarfile.open
    monkeypatch.setattr(imdb.tarfile, "open", lambda *args, **kw: opened.append(args[0]) or real_open(*args, **kw))
    root = tmp_path / "root"
    reviews = load_imdb_parts(root, None, [UNSUP, NEG, POS])
    assert downloads == [imdb.URL] and len(opened) == 1
    assert [len(reviews[part]) for part in (UNSUP, NEG, POS)] == [12, 11, 11]
    # No test review, README, bag of words, archive or temporary folder is left.
    assert tree(root / "aclImdb") == part_tree("neg", "pos", "unsup")
    assert [doc[0] for doc in load_imdb_train(root, None)] == TRAIN_FIRST_SENTENCES and len(downloads) == 1


@pytest.mark.parametrize("first,first_parts,then,count", [(load_imdb_unsup, ("unsup",), load_imdb_train, 22),
                                                          (load_imdb_train, ("neg", "pos"), load_imdb_unsup, 12)])
def test_a_part_unpacked_before_is_kept_and_the_others_unpack_beside_it(tmp_path, serve, first, first_parts,
                                                                        then, count):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    (mirror / "aclImdb").mkdir(parents=True)
    downloads = serve(write_archive(mirror / "aclImdb" / imdb.ARCHIVE))
    first(root, mirror)
    assert tree(root / "aclImdb") == part_tree(*first_parts)  # only what was asked for
    unpacked = {path: path.stat().st_ino for path in (root / "aclImdb").rglob("*")}
    documents = then(root, mirror)
    assert len(documents) == count and downloads == []
    assert tree(root / "aclImdb") == part_tree("neg", "pos", "unsup")
    assert all(path.stat().st_ino == inode for path, inode in unpacked.items())  # the first part untouched
    (mirror / "aclImdb" / imdb.ARCHIVE).unlink()
    assert then(root, mirror) == documents  # read from the root now


def test_the_mirrors_unlabelled_tree_is_read_and_its_archive_gives_the_training_reviews(tmp_path, serve):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_tree(mirror)
    downloads = serve(write_archive(mirror / "aclImdb" / imdb.ARCHIVE))
    before = tree(mirror)
    reviews = load_imdb_parts(root, mirror, [UNSUP, NEG, POS])
    assert [doc[0] for doc in reviews[NEG] + reviews[POS]] == TRAIN_FIRST_SENTENCES and len(reviews[UNSUP]) == 12
    assert downloads == [] and tree(mirror) == before
    assert tree(root / "aclImdb") == part_tree("neg", "pos")  # the unlabelled reviews read in the mirror


def test_an_archive_without_the_training_reviews_is_refused_and_nothing_unpacked(tmp_path, serve):
    serve(write_archive(tmp_path / "served.tar.gz", train=False))
    root = tmp_path / "root"
    with pytest.raises(GraphseqError, match=f"^damaged IMDB file {root / 'aclImdb' / imdb.ARCHIVE}: it holds no "
                                            f"review under aclImdb/train/neg or aclImdb/train/pos; it was removed"):
        load_imdb_parts(root, None, [UNSUP, NEG, POS])
    assert not root.exists()  # not even the unlabelled reviews the archive did hold


def test_a_training_review_missing_from_the_numbering_is_named_with_its_folder(tmp_path):
    mirror = tmp_path / "mirror"
    write_tree(mirror, NEG_REVIEWS, "neg")
    folder = write_tree(mirror, POS_REVIEWS, "pos")
    (folder / "4_7.txt").unlink()
    with pytest.raises(GraphseqError, match=f"^{folder} lacks review 4 \\(it holds 5_8.txt next, and 10 reviews "
                                            f"in all\\); restore it"):
        load_imdb_train(tmp_path / "root", mirror)


def test_an_empty_training_folder_is_named_with_its_part(tmp_path):
    write_tree(tmp_path, NEG_REVIEWS, "neg")
    pos = write_tree(tmp_path, {}, "pos")
    with pytest.raises(GraphseqError, match=f"^{pos} holds no review \\(<id>_<rating>.txt files\\); replace it "
                                            f"with a good copy of the extracted aclImdb/train/pos, or delete it"):
        load_imdb_train(tmp_path, None)


def test_a_training_review_given_twice_with_two_ratings_is_named(tmp_path):
    neg = write_tree(tmp_path, NEG_REVIEWS, "neg")
    write_tree(tmp_path, POS_REVIEWS, "pos")
    (neg / "3_2.txt").write_text("The same review, rated again.")
    with pytest.raises(GraphseqError, match=f"^{neg} holds review 3 twice \\(3_2.txt and 3_4.txt\\); restore"):
        load_imdb_train(tmp_path, None)


def test_the_parts_read_together_are_split_once_while_their_files_are_unchanged(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    write_tree(mirror)
    write_tree(mirror, NEG_REVIEWS, "neg")
    write_tree(mirror, POS_REVIEWS, "pos")
    split = []
    real = imdb.review_sentences
    monkeypatch.setattr(imdb, "review_sentences", lambda text: split.append(text) or real(text))
    first = load_imdb_parts(tmp_path / "root", mirror, [UNSUP, NEG, POS])
    assert load_imdb_parts(tmp_path / "root", mirror, [UNSUP, NEG, POS]) == first and len(split) == 34
    assert load_imdb_train(tmp_path / "root", mirror) == first[NEG] + first[POS] and len(split) == 34
