"""Documents in any language: each detected (or set), stored, and searched in full text with its own
stemming; Chinese segmented; a mixed document section by section; bad settings refused with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import language
from pipeline.config import Profile, load_profile
from pipeline.errors import ConfigError
from pipeline.ingest import run_ingest
from pipeline.model import Document, Section

DOCS = {
    "de.md": "# Abfrageparameter\n\nAbfrageparameter und Validierungen für Zeichenketten werden in FastAPI "
    "deklariert. Die Funktion erhält die Parameter automatisch und prüft ihre Typen.\n",
    "ru.md": "# Параметры запроса\n\nПараметры запроса и строковые валидации объявляются в FastAPI. Функция "
    "получает параметры автоматически и проверяет их типы.\n",
    "zh.md": "# 查询参数\n\n在 FastAPI 中声明查询参数和字符串校验。函数会自动接收这些参数并检查它们的类型。\n",
    "en.md": "# Query parameters\n\nQuery parameters and string validations are declared in FastAPI. The "
    "function receives the parameters automatically and checks their types.\n",
}


def _fulltext(conn, collection: str, query: str) -> list[str]:
    return [
        Path(r[0]).name
        for r in conn.execute(
            """SELECT d.source_uri FROM chunkyard_fulltext_search(%s, %s, 5) f
               JOIN chunks k ON k.id = f.chunk_id JOIN documents d ON d.id = k.document_id""",
            (collection, query),
        )
    ]


@pytest.fixture
def four_languages(tmp_path, settings, conn):
    folder = tmp_path / "ml"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    result = run_ingest([folder], settings=settings, collection="ml")
    assert not result.stats.errors
    return folder


def test_each_document_is_stored_and_searched_in_its_language(four_languages, conn):
    langs = {Path(u).name: lang for u, lang in conn.execute("SELECT source_uri, language FROM documents")}
    assert langs == {"de.md": "de", "ru.md": "ru", "zh.md": "zh", "en.md": "en"}
    chunk_langs = {r[0] for r in conn.execute("SELECT DISTINCT language FROM chunks")}
    assert chunk_langs == {"de", "ru", "zh", "en"}
    assert sorted(conn.execute("SELECT languages FROM collections WHERE name = 'ml'").fetchone()[0]) == [
        "de", "en", "ru", "zh"
    ]  # fmt: skip
    # stemming in the document's own language: other inflections of the words find them
    assert _fulltext(conn, "ml", "Zeichenkette validieren")[0] == "de.md"
    assert _fulltext(conn, "ml", "параметров запросов")[0] == "ru.md"
    # Chinese has no spaces: a word from inside a sentence matches (character bigrams)
    assert _fulltext(conn, "ml", "字符串")[0] == "zh.md"
    assert _fulltext(conn, "ml", "校验类型")[0] == "zh.md"
    assert _fulltext(conn, "ml", "validation")[0] == "en.md"


def test_cjk_runs_become_bigrams_in_sql_for_chunks_and_queries(conn):
    words = [
        conn.execute(r"SELECT regexp_split_to_array(trim(chunkyard_fts_prepare(%s)), '\s+')", (t,)).fetchone()[0]
        for t in ("全文搜索 in 中文", "no cjk here", "字", "東京タワー")
    ]
    assert words == [["全文", "文搜", "搜索", "in", "中文"], ["no", "cjk", "here"], ["字"], ["東京", "京タ", "タワ", "ワー"]]
    configs = dict(
        conn.execute("SELECT l, chunkyard_fts_config(l)::text FROM unnest(ARRAY['da', 'de', 'zh', 'pl', '']) l")
    )
    assert configs == {"da": "danish", "de": "german", "zh": "simple", "pl": "simple", "": "simple"}


def test_a_document_that_mixes_languages_is_detected_section_by_section():
    de = "Die Funktion erhält die Parameter automatisch und prüft ihre Typen, bevor sie etwas zurückgibt. " * 4
    da = "Funktionen modtager parametrene automatisk og kontrollerer deres typer, før de returnerer noget. " * 4
    text = f"# Deutsch\n\n{de}\n\n# Dansk\n\n{da}\n"
    cut = text.index("# Dansk")
    doc = Document("file:///mixed.md", "markdown", text, [Section(0, cut), Section(cut, len(text))])
    language.assign(doc)
    assert [s.lang for s in doc.sections] == ["de", "da"]


def test_the_profile_sets_languages_by_path_and_code_is_english():
    prof = Profile(language="auto", languages={"*.da.md": "da", "notes/*": "de"})
    doc = Document("file:///x/guide.da.md", "markdown", "Hello there, this is English.", [Section(0, 29)])
    language.assign(doc, setting=prof.language, by_path=prof.languages)
    assert doc.lang == "da" and doc.sections[0].lang == "da"
    doc = Document("file:///x/app.py", "code", "def tilføj(a, b):\n    return a + b\n", [Section(0, 36)])
    language.assign(doc)
    assert doc.lang == "en"
    # a changed setting reads stored files again
    assert Profile().language_key() != prof.language_key() != Profile(language="de").language_key()


def test_text_without_letters_and_unknown_settings(tmp_path, settings, conn):
    folder = tmp_path / "n"
    folder.mkdir()
    (folder / "numbers.txt").write_text("12 34 56\n78 90 12\n", encoding="utf-8")
    (folder / "polish.md").write_text(
        "# Zapytania\n\nParametry zapytania i walidacja ciągów znaków są deklarowane w FastAPI. Funkcja "
        "otrzymuje parametry automatycznie i sprawdza ich typy.\n",
        encoding="utf-8",
    )
    result = run_ingest([folder], settings=settings, collection="n")
    assert not result.stats.errors
    langs = {Path(u).name: lang for u, lang in conn.execute("SELECT source_uri, language FROM documents")}
    assert langs == {"numbers.txt": "", "polish.md": "pl"}
    # no stemmer for Polish in Postgres: 'simple', said once in the run's warnings
    notes = [w for u, w in result.stats.warnings if "'pl'" in w]
    assert len(notes) == 1 and "simple" in notes[0]
    assert _fulltext(conn, "n", "walidacja")[0] == "polish.md"
    assert _fulltext(conn, "n", "56")[0] == "numbers.txt"
    bad = tmp_path / "bad.toml"
    bad.write_text('language = "german!"\n')
    with pytest.raises(ConfigError, match="language 'german!'"):
        load_profile(bad)


def test_a_translated_page_is_in_the_language_of_its_prose_not_of_its_code():
    """A manual page in Russian that is mostly English code is Russian, and so is each of its sections,
    code-only ones included (their words are searched with the page's own stemming)."""
    code = "```python\n" + "from fastapi import FastAPI\n\napp = FastAPI()\n\n@app.get('/items/{item_id}')\n" * 12 + "```\n"
    prose_ru = "Параметры запроса объявляются как аргументы функции, которые не являются частью пути. "
    text = f"# Параметры запроса\n\n{prose_ru * 2}\n\n{code}\n## Пример\n\n{code}\n`item_id` {prose_ru}\n"
    cut = text.index("## Пример")
    doc = Document("file:///ru/query-params.md", "markdown", text, [Section(0, cut), Section(cut, len(text))])
    language.assign(doc)
    assert doc.lang == "ru" and [s.lang for s in doc.sections] == ["ru", "ru"]


@pytest.mark.subprocess
def test_the_cli_sets_the_language_and_status_shows_each_collections_languages(tmp_path, database_url):
    import json
    import os
    import subprocess
    import sys

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(DOCS["en.md"], encoding="utf-8")
    env = {**os.environ, "CHUNKYARD_DATABASE_URL": database_url, "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                              env=env, timeout=600)  # fmt: skip

    bad = cli("ingest", str(folder), "--no-prefect", "--language", "german!")
    assert bad.returncode == 2 and "--language" in bad.stderr and "Traceback" not in bad.stderr
    assert cli("ingest", str(folder), "--no-prefect", "-c", "da", "--language", "da").returncode == 0
    assert cli("ingest", str(folder), "--no-prefect", "-c", "auto").returncode == 0
    status = json.loads(cli("status", "--json").stdout)
    langs = {c["name"]: c["languages"] for c in status["collections"]}
    assert langs == {"da": {"da": 1}, "auto": {"en": 1}}
    assert "da 1" in cli("status").stdout
    # the languages the model's card declares, beside the model (all-MiniLM-L6-v2: English only)
    assert all(c["model"].endswith(", en)") for c in status["collections"]), status["collections"]


def test_hybrid_search_weighs_vectors_by_the_languages_the_model_knows(four_languages, conn):
    """The model's languages (its card) are stored with its set; a query whose candidates are mostly in other
    languages is ranked by full text alone ('auto': vector weight 0), any other keeps p_alpha, and so does a
    model whose languages are not known."""
    assert conn.execute("SELECT languages FROM embedding_sets WHERE status = 'active'").fetchone()[0] == ["en"]
    ids = dict(conn.execute("SELECT d.language, k.id FROM chunks k JOIN documents d ON d.id = k.document_id"))

    def weight(*langs: str) -> float:
        return conn.execute(
            "SELECT chunkyard_vector_weight('ml', %s, 0.5)", ([ids[x] for x in langs],)
        ).fetchone()[0]

    assert weight("zh") == weight("ru", "zh") == weight("de", "ru", "en") == 0
    assert weight("en") == weight("en", "de") == weight() == 0.5  # half is not most
    conn.execute("UPDATE embedding_sets SET languages = NULL")  # a model whose card names no language
    assert weight("zh", "ru") == 0.5


def test_hybrid_search_in_a_language_the_model_lacks_is_full_text_then_vectors(four_languages, conn):
    """'auto' on a Russian query: the full-text ranking first, then the other candidates by cosine similarity
    (not by id: the vector half still orders what full text does not find)."""
    from pipeline.embed import get_embedder

    q = "параметров запросов"
    vec = get_embedder("sentence-transformers/all-MiniLM-L6-v2").encode([q])[0]
    auto = [r[0] for r in conn.execute(
        "SELECT chunk_id FROM chunkyard_hybrid_search('ml', %s, %s, 10, p_whole_section => NULL)", (vec, q))]
    fts = [r[0] for r in conn.execute("SELECT chunk_id FROM chunkyard_fulltext_search('ml', %s, 10)", (q,))]
    near = [r[0] for r in conn.execute(
        "SELECT chunk_id FROM chunkyard_vector_candidates('ml', %s, 10) ORDER BY dist, chunk_id", (vec,))]
    assert fts and auto[: len(fts)] == fts
    assert auto[len(fts):] == [c for c in near if c not in fts]


def test_a_model_card_names_the_languages_a_model_was_trained_on(tmp_path):
    from pipeline.config import DEFAULT_MODEL
    from pipeline.embed import model_languages

    assert model_languages(DEFAULT_MODEL) == model_languages(f"{DEFAULT_MODEL}@openvino-int8") == ["en"]
    cards = {
        "one": "---\nlanguage: de\nlicense: mit\n---\n# m\n",
        "flow": "---\nlanguage: [en, DE]\n---\n",
        "block": "---\ntags:\n- x\nlanguage:\n- zh\n- en\nlicense: mit\n---\n",
        "multi": "---\nlanguage:\n- multilingual\n- en\n---\n",
        "none": "---\nlicense: mit\n---\n",
        "plain": "# a model\n",
    }
    for name, card in cards.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(card, encoding="utf-8")
    got = {name: model_languages(str(tmp_path / name)) for name in [*cards, "missing"]}
    assert got == {"one": ["de"], "flow": ["de", "en"], "block": ["en", "zh"], "multi": None, "none": None,
                   "plain": None, "missing": None}  # fmt: skip
