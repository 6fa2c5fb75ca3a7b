"""Offline indexes over kept collections: rankings replayed in Python as the SQL ranks, scored as it answers.

`Index` indexes a configuration once into a kept collection (`_variants_<set>`, embeddings from the cache) and
reads every chunk's vector and each question's BM25 top 50 (`chunkyard_fulltext_search`): exact vector search,
convex fusion as `chunkyard_hybrid_search` (the experiments retrieval_variants, budget_gap and fts_context).
`Replay` asks the SQL functions a search uses for each question's candidates once, and keeps them in a pickle
beside the database (bench/fusion.py). `complete_sections` is `chunkyard_context`'s section rule in Python.
"""

from __future__ import annotations

import hashlib
import pickle
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.eval_chroma import load_set
from pipeline import db
from pipeline import evaluate as ev
from pipeline.config import Settings
from pipeline.evaluate.metrics import Retrieved, budget_scores, question_scores
from pipeline.tokens import counter

#: Candidates of each half, as chunkyard_hybrid_search's p_candidates.
CANDIDATES = 50


class Index:
    """One collection's chunks in document order, their vectors, and each question's BM25 list."""

    def __init__(self, qset: str, spec: str, settings: Settings) -> None:
        self.corpora, self.questions, _ = load_set(qset)
        name = f"_variants_{qset}" + ("" if spec == "default" else "_" + hashlib.sha256(spec.encode()).hexdigest()[:8])
        url = db.database_url(settings)
        with db.connection(url) as conn:
            have = conn.execute("SELECT 1 FROM collections WHERE name = %s", (name,)).fetchone()
        if not have:
            ev.pipeline_indexer(ev.parse_config(spec), self.corpora, settings)(name)
        qv = ev.embed_questions(self.questions, settings)
        with db.connection(url) as conn:
            self.rows = conn.execute(
                """SELECT c.id, d.source_uri, c.char_start, c.char_end, c.section_id, c.text, s.char_start,
                          s.char_end, e.embedding
                   FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sections s ON s.id = c.section_id
                   JOIN chunk_embeddings e ON e.chunk_id = c.id JOIN collections col ON col.id = c.collection_id
                   WHERE col.name = %s ORDER BY d.source_uri, c.char_start""",
                (name,),
            ).fetchall()
            texts = dict(conn.execute(
                """SELECT d.source_uri, d.normalized_text FROM documents d
                   JOIN collections col ON col.id = d.collection_id WHERE col.name = %s""", (name,),
            ).fetchall())  # fmt: skip
            self.bm25 = [
                conn.execute(
                    "SELECT chunk_id, score FROM chunkyard_fulltext_search(%s, %s, %s)",
                    (name, q.text, CANDIDATES),
                ).fetchall()
                for q in self.questions
            ]
            # each question's lexemes with their IDF (as chunkyard_fulltext_search computes it), and which of them
            # each BM25 hit holds: how much of the query's IDF mass a full-text list actually matches
            self.qidf: list[dict[str, float]] = []
            self.hit_terms: list[dict[int, set[str]]] = []
            for q, hits in zip(self.questions, self.bm25, strict=True):
                idf = dict(conn.execute(
                    """SELECT t.lexeme, ln(1 + (greatest(col.fts_chunks, t.df) - t.df + 0.5) / (t.df + 0.5))
                       FROM fts_terms t JOIN collections col ON col.id = t.collection_id
                       WHERE col.name = %s AND t.df > 0
                         AND t.lexeme = ANY (tsvector_to_array(to_tsvector('english', %s)))""",
                    (name, q.text),
                ).fetchall())  # fmt: skip
                self.qidf.append({w: float(v) for w, v in idf.items()})
                ids = [c for c, _ in hits]
                self.hit_terms.append({c: set(ws) & set(idf) for c, ws in conn.execute(
                    "SELECT id, tsvector_to_array(tsv) FROM chunks WHERE id = ANY(%s)", (ids,)).fetchall()})  # fmt: skip
        self.pos = {r[0]: i for i, r in enumerate(self.rows)}
        self.hit_terms = [{self.pos[c]: ws for c, ws in h.items()} for h in self.hit_terms]
        mat = np.vstack(
            [np.asarray(r[8].to_numpy() if hasattr(r[8], "to_numpy") else r[8]) for r in self.rows]
        )
        self.sims = qv @ mat.T
        self.corpus_of = {u: Path(u).stem for u in texts}
        self.maps = {u: ev.OffsetMap(self.corpora[self.corpus_of[u]].text, t, u) for u, t in texts.items()}
        self._ends: dict[int, list[int]] = {}
        self._cl100k = counter("cl100k_base")

    def raw(self, i: int, span: tuple[int, int] | None = None) -> Retrieved:
        """Chunk i (or a span of its document) as a raw-corpus range."""
        u = self.rows[i][1]
        s, e = span or self.rows[i][2:4]
        return Retrieved(self.corpus_of[u], *self.maps[u].to_raw(s, e))

    def ends(self, i: int) -> list[int]:
        """Where chunk i's first 1, 2, ... cl100k tokens end, in raw characters from its start."""
        if i not in self._ends:
            u, s, e = self.rows[i][1:4]
            m, rs = self.maps[u], self.raw(i).start
            self._ends[i] = [
                m.to_raw(s, s + b)[1] - rs for _, b in self._cl100k.encode_offsets(self.rows[i][5])
            ]
        return self._ends[i]

    def adjacent(self, i: int, j: int) -> bool:
        """Neighbouring chunks of one section."""
        return abs(i - j) == 1 and self.rows[i][4] == self.rows[j][4]

    def coverage(self, qi: int, top: int = 1) -> float:
        """Share of the query's IDF mass that the best `top` BM25 hits hold (the best of them): near 1 when the
        full-text list found the query's words together, low when it matched a few of many (template) words."""
        idf, hits = self.qidf[qi], self.bm25[qi][:top]
        total = sum(idf.values())
        if not hits or total <= 0:
            return 0.0
        return max(sum(idf[w] for w in self.hit_terms[qi].get(self.pos[c], ())) for c, _ in hits) / total

    def fused(self, qi: int, *, alpha: float = 0.5, scale: str = "minmax", adaptive: bool = False,
              neighbour: float = 0.0, bm25_weight: Callable[[int], float] | None = None) -> list[int]:  # fmt: skip
        """Convex fusion over the top 50 of each list (chunkyard_hybrid_search), with the variants' switches."""
        vtop = np.argsort(-self.sims[qi])[:CANDIDATES]
        bm = {self.pos[c]: s for c, s in self.bm25[qi]}
        cand = sorted(set(vtop.tolist()) | set(bm))
        sv = np.array([self.sims[qi][i] for i in cand])
        bv = np.array([bm.get(i, 0.0) for i in cand])

        def norm(x: np.ndarray) -> np.ndarray:
            if scale == "z":
                return (x - x.mean()) / (x.std() + 1e-9)
            return (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)

        if adaptive:  # trust the list whose top stands out from its own top 20

            def gap(x: np.ndarray) -> float:
                x = np.sort(x)[::-1]
                return float((x[0] - x[:20].mean()) / x[0]) if len(x) > 1 and x[0] > 0 else 0.0

            v, b = gap(self.sims[qi][vtop]), gap(np.array([s for _, s in self.bm25[qi]]))
            alpha = min(max(v / (v + b), 0.25), 0.75) if v + b > 0 else 0.5
        if bm25_weight is not None:  # the full-text half scaled by a per-query confidence in [0, 1]
            w = min(max(bm25_weight(qi), 0.0), 1.0)
            sc = alpha * norm(sv) + (1 - alpha) * w * norm(bv)
        else:
            sc = alpha * norm(sv) + (1 - alpha) * norm(bv)
        if neighbour:
            d, lo = dict(zip(cand, sc, strict=True)), sc.min()
            sc = np.array([s + neighbour * max([d.get(j, lo) - lo for j in (i - 1, i + 1)
                                                if 0 <= j < len(self.rows) and self.adjacent(i, j)] or [0])
                           for i, s in zip(cand, sc, strict=True)])  # fmt: skip
        return [cand[j] for j in np.argsort(-sc, kind="stable")]

    def vector(self, qi: int) -> list[int]:
        return list(np.argsort(-self.sims[qi])[:CANDIDATES])

    def fulltext(self, qi: int) -> list[int]:
        """BM25's own ranking (chunkyard_fulltext_search), vector ranks after its hits."""
        out = [self.pos[c] for c, _ in self.bm25[qi]]
        seen = set(out)
        return out + [i for i in self.vector(qi) if i not in seen]

    def rrf(self, qi: int, k: int = 60, wb: float = 1.0) -> list[int]:
        """Reciprocal rank fusion of the two top-50 lists (chunkyard_hybrid_search's 'rrf'), BM25 weighted by wb."""
        sc: dict[int, float] = defaultdict(float)
        for r, i in enumerate(self.vector(qi), 1):
            sc[i] += 1 / (k + r)
        for r, (c, _) in enumerate(self.bm25[qi], 1):
            sc[self.pos[c]] += wb / (k + r)
        return sorted(sc, key=lambda i: -sc[i])

    def merged(self, ranking: list[int], k: int) -> list[Retrieved]:
        """k spans: a chunk next to a taken one of the same section joins it instead of counting."""
        groups: list[set[int]] = []
        taken: list[int] = []
        for i in ranking:
            g = next((g for g in groups if any(self.adjacent(i, j) for j in g)), None)
            if g is None:
                if len(groups) >= k:
                    break
                g = set()
                groups.append(g)
            g.add(i)
            taken.append(i)
        return [self.raw(i) for i in taken]

    def sections(self, ranking: list[int], k: int, share: float = 2 / 3) -> list[Retrieved]:
        """The top k, a section returned whole when its retrieved chunks cover `share` of it."""
        top = ranking[:k]
        by_sec: dict[int, list[int]] = defaultdict(list)
        for i in top:
            by_sec[self.rows[i][4]].append(i)
        out, done = [], set()
        for i in top:
            sec, (ss, se) = self.rows[i][4], self.rows[i][6:8]
            if sec in done:
                continue
            cov = sum(self.rows[j][3] - self.rows[j][2] for j in by_sec[sec])
            if se > ss and cov / (se - ss) >= share:
                out.append(self.raw(i, (ss, se)))
                done.add(sec)
            else:
                out.append(self.raw(i))
        return out


def complete_sections(ix: Index, ranking: list[int], share: float) -> list[int]:
    """The section rule of the SQL search applied while the budget fills: once a section's chunks read so far
    cover `share` of it, the rest of its chunks follow at once (in document order), counted in the budget."""
    by_sec: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(ix.rows):
        by_sec[r[4]].append(i)
    out, seen = [], set()
    for i in ranking:
        if i in seen:
            continue
        seen.add(i)
        out.append(i)
        sec = ix.rows[i][4]
        ss, se = ix.rows[i][6:8]
        got = sum(ix.rows[j][3] - ix.rows[j][2] for j in by_sec[sec] if j in seen)
        if se > ss and got / (se - ss) >= share:
            for j in by_sec[sec]:
                if j not in seen:
                    seen.add(j)
                    out.append(j)
    return out


# ------------------------------------------------------------------- the SQL's own candidates


@dataclass
class Query:
    """What the SQL gave for one question: both candidate lists and the full-text facts of the query."""

    vec: list[tuple[int, float]]  # (row, cosine similarity), best first
    fts: list[tuple[int, float]]  # (row, BM25), best first
    sims: dict[int, float]  # cosine similarity of every candidate
    idf: dict[str, float]  # the query's lexemes in the collection, with their IDF
    n_lexemes: int  # all of the query's lexemes (in the collection or not)
    held: dict[int, set[str]] = field(default_factory=dict)  # full-text candidate -> query lexemes it holds
    language: str = ""  # the query's language (CLD2), '' when unreliable


class Replay(Index):
    """A set's kept collection (chunks in document order) and each question's candidates, from the SQL."""

    def __init__(self, qset: str, settings: Settings, *, refresh: bool = False) -> None:  # noqa: PLR0915
        self.qset = qset
        self.corpora, self.questions, _ = load_set(qset)
        name = f"_fusion_{qset}"
        cache = settings.data_dir / f"fusion-{qset}.pkl"
        self._ends: dict[int, list[int]] = {}
        self._cl100k = counter("cl100k_base")
        if cache.exists() and not refresh:  # plain data (a pickled class would depend on how this was run)
            self.rows, texts, self.languages, queries = pickle.loads(cache.read_bytes())
            self.queries = [Query(**q) for q in queries]
        else:
            self.rows, texts, self.languages, self.queries = self._fetch(name, settings)
            queries = [asdict(q) for q in self.queries]
            cache.write_bytes(pickle.dumps((self.rows, texts, self.languages, queries)))
        self.pos = {r[0]: i for i, r in enumerate(self.rows)}
        with db.connection(db.database_url(settings)) as conn:  # each chunk's language (chunks.language)
            lang = dict(conn.execute("SELECT id, language FROM chunks WHERE id = ANY(%s)",
                                     ([r[0] for r in self.rows],)).fetchall())  # fmt: skip
        self.chunk_language = [lang.get(r[0], "") for r in self.rows]
        self.corpus_of = {u: Path(u).stem for u in texts}
        self.maps = {u: ev.OffsetMap(self.corpora[self.corpus_of[u]].text, t, u) for u, t in texts.items()}

    def _fetch(self, name: str, settings: Settings) -> tuple[list, dict, list[str], list[Query]]:
        from pipeline.language import detect

        url = db.database_url(settings)
        with db.connection(url) as conn:
            have = conn.execute("SELECT 1 FROM collections WHERE name = %s", (name,)).fetchone()
        if not have:
            ev.pipeline_indexer(ev.parse_config("default"), self.corpora, settings)(name)
        qv = ev.embed_questions(self.questions, settings)
        queries = []
        with db.connection(url) as conn:
            rows = conn.execute(
                """SELECT c.id, d.source_uri, c.char_start, c.char_end, c.section_id, c.text, s.char_start,
                          s.char_end
                   FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sections s ON s.id = c.section_id
                   JOIN collections col ON col.id = c.collection_id
                   WHERE col.name = %s AND d.deleted_at IS NULL ORDER BY d.source_uri, c.char_start""",
                (name,),
            ).fetchall()
            pos = {r[0]: i for i, r in enumerate(rows)}
            texts = dict(conn.execute(
                """SELECT d.source_uri, d.normalized_text FROM documents d
                   JOIN collections col ON col.id = d.collection_id WHERE col.name = %s""", (name,),
            ).fetchall())  # fmt: skip
            (langs,) = conn.execute("SELECT languages FROM collections WHERE name = %s", (name,)).fetchone()
            for q, v in zip(self.questions, qv, strict=True):
                vec = conn.execute(
                    "SELECT chunk_id, 1 - dist FROM chunkyard_vector_candidates(%s, %s, %s) ORDER BY dist, chunk_id",
                    (name, v, CANDIDATES),
                ).fetchall()
                fts = conn.execute(
                    "SELECT chunk_id, score FROM chunkyard_fulltext_search(%s, %s, %s)", (name, q.text, CANDIDATES)
                ).fetchall()
                ids = sorted({c for c, _ in vec} | {c for c, _ in fts})
                sims = dict(conn.execute(
                    "SELECT chunk_id, 1 - dist FROM chunkyard_vector_distances(%s, %s, %s)", (name, v, ids)
                ).fetchall())  # fmt: skip
                lex = conn.execute("SELECT chunkyard_query_lexemes(%s, %s)", (q.text, langs)).fetchone()[0]
                idf = dict(conn.execute(
                    """SELECT t.lexeme, ln(1 + (greatest(col.fts_chunks, t.df) - t.df + 0.5) / (t.df + 0.5))
                       FROM fts_terms t JOIN collections col ON col.id = t.collection_id
                       WHERE col.name = %s AND t.df > 0 AND t.lexeme = ANY (%s)""",
                    (name, lex),
                ).fetchall())  # fmt: skip
                held = {pos[c]: set(ws) & set(idf) for c, ws in conn.execute(
                    "SELECT id, tsvector_to_array(tsv) FROM chunks WHERE id = ANY(%s)", ([c for c, _ in fts],)
                ).fetchall()}  # fmt: skip
                lang, reliable, _ = detect(q.text)
                queries.append(Query(
                    vec=[(pos[c], float(s)) for c, s in vec], fts=[(pos[c], float(s)) for c, s in fts],
                    sims={pos[c]: float(s) for c, s in sims.items()}, idf={w: float(x) for w, x in idf.items()},
                    n_lexemes=len(lex), held=held, language=lang if reliable else "",
                ))  # fmt: skip
            conn.commit()
        return rows, texts, list(langs), queries

    # ----------------------------------------------------------------------------------- scoring

    def at_k(self, qi: int, ranking: list[int], k: int = 5) -> dict:
        """Scores at k as the SQL search answers (a section at least half retrieved comes back whole)."""
        q = self.questions[qi]
        return question_scores(q.excerpts, q.corpus_id, self.sections(ranking, k, 0.5))

    def at_budget(self, qi: int, ranking: list[int], budget: int) -> dict:
        """Scores at a budget as chunkyard_context packs it (a section completed once half of it is read)."""
        q = self.questions[qi]
        packed = complete_sections(self, ranking, 0.5)
        out, spent = [], 0
        for i in packed:  # only as many chunks as the budget can read
            out.append(i)
            spent += len(self.ends(i))
            if spent >= budget:
                break
        return budget_scores(q.excerpts, q.corpus_id, [self.raw(i) for i in out], [self.ends(i) for i in out],
                             budget)  # fmt: skip
