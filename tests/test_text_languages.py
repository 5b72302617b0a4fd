"""Text search in mongod's 15 languages and "none": each language's Snowball stemmer
and stop words through a text index's `default_language`, a document's
`language_override` field, and `$text`'s `$language`; mongod's errors for an
unsupported language (BadValue 2 for the index and `$language`, 17262 for a document)."""

import pytest
from pymongo import TEXT
from pymongo.errors import OperationFailure, WriteError

# (language, sentence, another form of one of its words, a stop word in the sentence)
SENTENCES = [
    ("danish", "Hundene løber i parken og de leger med børnene", "hunden", "og"),
    ("dutch", "De kinderen lopen naar het huis van hun grootouders", "grootouder", "het"),
    ("english", "The children were running in the parks", "runs", "the"),
    ("finnish", "Kissat juoksevat talossa ja ne ovat iloisia", "kissa", "ja"),
    ("french", "Les enfants mangeaient des pommes dans l'école", "mange", "les"),
    ("german", "Die Kinder spielten mit den Hunden und sie lachten", "Hund", "und"),
    ("hungarian", "A gyerekek a házakban játszanak és nem az utcán", "házak", "és"),
    ("italian", "I bambini mangiavano le mele nella scuola", "bambino", "nella"),
    ("norwegian", "Hundene løper i parken og de leker med barna", "barnet", "og"),
    ("portuguese", "As crianças comiam as maçãs na escola", "escolas", "na"),
    ("romanian", "Copiii mâncau merele în grădina școlii și noi", "grădini", "și"),
    ("russian", "Дети играли с собаками в парке и они смеялись", "собака", "они"),
    ("spanish", "Los niños comían las manzanas en la escuela", "manzana", "los"),
    ("swedish", "Hundarna springer i parken och de leker med barnen", "springa", "och"),
    ("turkish", "Çocuklar bahçede oynuyorlar ve bu çok güzel", "bahçe", "ve"),
]

ISO_CODES = {
    "danish": "da", "dutch": "nl", "english": "en", "finnish": "fi", "french": "fr",
    "german": "de", "hungarian": "hu", "italian": "it", "norwegian": "nb",
    "portuguese": "pt", "romanian": "ro", "russian": "ru", "spanish": "es",
    "swedish": "sv", "turkish": "tr",
}


def ids(coll, search, **extra):
    return sorted(d["_id"] for d in coll.find({"$text": dict({"$search": search}, **extra)}))


@pytest.mark.parametrize("language,sentence,other_form,stop_word", SENTENCES)
def test_default_language_stems_and_drops_stop_words(coll, language, sentence, other_form, stop_word):
    coll.create_index([("t", TEXT)], default_language=language)
    coll.insert_one({"_id": 1, "t": sentence})
    # Another form of a word finds the sentence: both stem to one term.
    assert ids(coll, other_form) == [1]
    # A stop word is neither indexed nor searched for.
    assert ids(coll, stop_word) == []
    # The same words under "none": no stemming, no stop words.
    none = coll.database[coll.name + "_none"]
    none.create_index([("t", TEXT)], default_language="none")
    none.insert_one({"_id": 1, "t": sentence})
    assert ids(none, stop_word) == [1]
    assert ids(none, other_form) == []


@pytest.mark.parametrize("language,sentence,other_form,stop_word", SENTENCES)
def test_language_override_and_dollar_language(coll, language, sentence, other_form, stop_word):
    # The index's language is "none"; the document says its own in a custom field.
    coll.create_index([("t", TEXT)], default_language="none", language_override="lang")
    coll.insert_one({"_id": 1, "t": sentence, "lang": language})
    # The query's terms are stemmed in the language $language names.
    assert ids(coll, other_form, **{"$language": language}) == [1]
    assert ids(coll, stop_word, **{"$language": language}) == []
    # Its ISO 639-1 code names the language as well.
    assert ids(coll, other_form, **{"$language": ISO_CODES[language]}) == [1]


def test_unsupported_languages_fail_as_in_mongod(coll):
    with pytest.raises(OperationFailure) as exc:
        coll.create_index([("t", TEXT)], default_language="klingon")
    assert exc.value.code == 2
    assert 'unsupported language: "klingon"' in str(exc.value)
    coll.create_index([("t", TEXT)])
    with pytest.raises(WriteError) as exc:
        coll.insert_one({"t": "qapla", "language": "klingon"})
    assert exc.value.code == 17262
    assert "language override unsupported: klingon" in str(exc.value)
    coll.insert_one({"_id": 1, "t": "running"})
    with pytest.raises(OperationFailure) as exc:
        list(coll.find({"$text": {"$search": "run", "$language": "klingon"}}))
    assert exc.value.code == 2
    assert 'unsupported language: "klingon"' in str(exc.value)
