"""The request trace of bench/cache/cache_bench.py: multi-turn conversations as LMCache sees
them, deterministic from a seed (no I/O, no clock).

What a request is. LMCache cuts a request's tokens into chunks and names chunk i by a
hash of chunk i-1's name and chunk i's tokens, so two requests that share a token
prefix share the names of its chunks. Here a chunk's tokens are stood for by a label
("sys2:3": chunk 3 of system prompt 2; "u7.1:4": chunk 4 of user 7's conversation 1),
and key i = blake2b(key i-1, label i). A request's keys are then:

    the system prompt's chunks + the user's conversation so far + a few new chunks

so shared system prompts give shared keys, and every turn extends the user's previous
prefix (its keys start with the previous turn's keys).

Who asks. Users are drawn with Zipf popularity (weight 1 / rank^zipf). A user's
conversation grows by 1-3 chunks a turn; after `max_turns` turns it ends and the user
starts a new one (new keys): LMCache stores every new prefix, so the stream of new
chunks never stops. The number of users is sized so that their conversations at full
length hold `working_set_factor` times the byte budget. Users are assigned to writers
(user i to writer i mod writers), so one writer runs a conversation's turns in order.

The hot set. A few extra conversations of fixed length ("hot0", "hot1", ...) are re-read
every `hot_every` requests throughout the run: a cache should keep them through the
flood of new chunks. They are flagged `hot` and reported apart.
"""

import bisect
import hashlib
import itertools
import random
from dataclasses import dataclass, field

KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class TraceConfig:
    budget_bytes: int
    chunk_bytes: int = 4 * MIB
    seed: int = 1
    working_set_factor: float = 4.0
    zipf: float = 1.0
    writers: int = 4
    tokens_per_chunk: int = 256  # LMCache's default chunk_size
    system_prompts: int = 4
    system_chunks: tuple = (2, 6)  # each prompt's length in chunks, drawn once
    turn_chunks: tuple = (1, 3)  # new chunks per turn
    max_turns: int = 6
    hot_conversations: int = 2
    hot_user_chunks: int = 4  # a hot conversation: a system prompt + this many chunks
    hot_every: int = 0  # requests between two re-reads of the hot set; 0: see hot_period

    def users(self):
        """How many users make the working set: their conversations at full length
        (the system prompts counted once) hold working_set_factor x the budget."""
        per_user = self.max_turns * sum(self.turn_chunks) / 2 * self.chunk_bytes
        shared = self.system_prompts * sum(self.system_chunks) / 2 * self.chunk_bytes
        want = self.working_set_factor * self.budget_bytes - shared
        return max(1, round(want / per_user))

    def hot_period(self):
        """User turns between two re-reads of the hot set: given, or so many that even
        if every turn stored all its chunks (a returning user whose prefix is gone),
        they would store half the budget: an LRU of the budget keeps the hot set."""
        if self.hot_every > 0:
            return self.hot_every
        system = sum(self.system_chunks) / 2
        conversation = (self.max_turns + 1) / 2 * sum(self.turn_chunks) / 2
        return max(1, int(self.budget_bytes / 2 / ((system + conversation) * self.chunk_bytes)))


@dataclass(frozen=True)
class Request:
    index: int  # position in the trace
    user: str
    writer: int
    keys: tuple  # chunk keys, in prefix order
    new_chunks: int  # chunks this turn adds at the end (0 for a hot re-read)
    hot: bool = False


def chunk_key(prev, label):
    """LMCache-style chained chunk name: the hash of the previous name and the chunk."""
    return hashlib.blake2b(f"{prev}|{label}".encode(), digest_size=16).hexdigest()


def chain(root, labels, start=""):
    """Keys of consecutive chunks after the key `start` ("" for the first chunk)."""
    keys, prev = [], start or root
    for label in labels:
        prev = chunk_key(prev, label)
        keys.append(prev)
    return keys


@dataclass
class _User:
    name: str
    writer: int
    conversation: int = -1
    system: int = 0
    turns: int = 0
    keys: list = field(default_factory=list)


class Trace:
    """An endless, deterministic iterator of Requests (take what you need)."""

    def __init__(self, config):
        self.config = config
        self.rng = random.Random(config.seed)
        self.root = f"seed{config.seed}"
        self.system = [self._system_prompt(p) for p in range(config.system_prompts)]
        n = config.users()
        self.users = [_User(f"u{i}", i % config.writers) for i in range(n)]
        # Zipf over user ranks; cumulative weights for bisect (random.choices would
        # rebuild them on every call).
        weights = [1.0 / (rank + 1) ** config.zipf for rank in range(n)]
        self.cumulative = list(itertools.accumulate(weights))
        self.hot = [self._hot_keys(h) for h in range(config.hot_conversations)]
        self.index = 0
        self.period = config.hot_period()
        # The hot conversations are read, one request each, at the start (where they
        # are stored) and again after every `period` user turns.
        self.hot_due = list(range(len(self.hot)))
        self.turns_since_hot = 0

    def _system_prompt(self, p):
        length = self.rng.randint(*self.config.system_chunks)
        return chain(self.root, [f"sys{p}:{j}" for j in range(length)])

    def _hot_keys(self, h):
        system = self.system[h % len(self.system)]
        labels = [f"hot{h}:{j}" for j in range(self.config.hot_user_chunks)]
        return tuple(system + chain(self.root, labels, start=system[-1]))

    def __iter__(self):
        return self

    def __next__(self):
        if self.hot_due:
            req = self._hot_request(self.hot_due.pop(0))
        else:
            req = self._turn(self._pick_user())
            self.turns_since_hot += 1
            if self.turns_since_hot == self.period:
                self.hot_due = list(range(len(self.hot)))
                self.turns_since_hot = 0
        self.index += 1
        return req

    def _hot_request(self, h):
        return Request(self.index, f"hot{h}", h % self.config.writers, self.hot[h], 0, hot=True)

    def _pick_user(self):
        x = self.rng.random() * self.cumulative[-1]
        return self.users[bisect.bisect_right(self.cumulative, x)]

    def _turn(self, user):
        c = self.config
        if user.conversation < 0 or user.turns >= c.max_turns:
            user.conversation += 1
            user.turns = 0
            user.system = self.rng.randrange(len(self.system))
            user.keys = list(self.system[user.system])
        new = self.rng.randint(*c.turn_chunks)
        start = len(user.keys) - len(self.system[user.system])
        labels = [f"{user.name}.{user.conversation}:{start + j}" for j in range(new)]
        user.keys += chain(self.root, labels, start=user.keys[-1])
        user.turns += 1
        return Request(self.index, user.name, user.writer, tuple(user.keys), new)


def take(config, n):
    """The first n requests of the trace of `config`."""
    return list(itertools.islice(Trace(config), n))
