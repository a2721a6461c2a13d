"""The journal (upstream's Journal, JournalChannel and LogMark; reference §6).

What makes an acknowledged add durable, in four layers, each its own module:

* :mod:`.records` — the ``BKLG`` file format: constants, record types, encoding (no I/O);
* :mod:`.decoder` — :class:`JournalDecoder`, the sans-IO reader (torn tails vs. junk);
* :mod:`.files` — journal files on disk: :class:`JournalWriter`, deleting old journals;
* :mod:`.scan` — reading them: names, scanning one file, replay from a mark;
* :mod:`.tail` — telling a record a power loss tore in the final write from a whole one;
* :mod:`.log_mark` — the ``lastMark`` file a checkpoint persists in every ledger dir;
* :mod:`.service` — :class:`JournalService`, group commit on trio (the journal and
  force-write threads upstream).

The names below are the package's surface, for tools and tests outside the bookie; inside
``bookie/`` modules import from the submodule that defines a name.
"""

from bookiesim.bookie.journal.decoder import (
    END,
    NEED_DATA,
    DecoderResult,
    JournalDecoder,
    Signal,
)
from bookiesim.bookie.journal.files import (
    DEFAULT_MAX_BACKUP_JOURNALS,
    DEFAULT_MAX_SIZE,
    DEFAULT_PREALLOC_SIZE,
    JournalReplay,
    JournalScan,
    JournalWriter,
    MissingJournalError,
    ReplayedRecord,
    delete_old_journals,
    journal_current_dir,
    journal_file_name,
    list_journal_ids,
    read_journal,
    replay,
)
from bookiesim.bookie.journal.log_mark import (
    LAST_MARK_FILE,
    LAST_MARK_SIZE,
    LastMarkFormatError,
    LogMark,
    last_mark_name,
    read_last_mark,
    write_last_mark,
)
from bookiesim.bookie.journal.records import (
    ALIGNMENT,
    CURRENT_VERSION,
    HEADER_SIZE,
    MAGIC,
    MAX_RECORD_SIZE,
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_FORCE_LEDGER,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    MIN_VERSION,
    PADDING_MASK,
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    VERSION_HEADER_SIZE,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalFormatError,
    JournalRecord,
    MasterKeyRecord,
    UnknownMetaRecord,
    data_start,
    encode_header,
    encode_record,
    padding,
    parse_header,
)
from bookiesim.bookie.journal.service import (
    Completion,
    GroupCommitPolicy,
    JournalFailedError,
    JournalService,
    SyncObserver,
)

__all__ = [
    "ALIGNMENT",
    "CURRENT_VERSION",
    "DEFAULT_MAX_BACKUP_JOURNALS",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_PREALLOC_SIZE",
    "END",
    "HEADER_SIZE",
    "LAST_MARK_FILE",
    "LAST_MARK_SIZE",
    "MAGIC",
    "MAX_RECORD_SIZE",
    "METAENTRY_ID_FENCE_KEY",
    "METAENTRY_ID_FORCE_LEDGER",
    "METAENTRY_ID_LEDGER_EXPLICITLAC",
    "METAENTRY_ID_LEDGER_KEY",
    "MIN_VERSION",
    "NEED_DATA",
    "PADDING_MASK",
    "V1",
    "V2",
    "V3",
    "V4",
    "V5",
    "V6",
    "VERSION_HEADER_SIZE",
    "Completion",
    "DataRecord",
    "DecoderResult",
    "ExplicitLacRecord",
    "FenceRecord",
    "GroupCommitPolicy",
    "JournalDecoder",
    "JournalFailedError",
    "JournalFormatError",
    "JournalRecord",
    "JournalReplay",
    "JournalScan",
    "JournalService",
    "JournalWriter",
    "LastMarkFormatError",
    "LogMark",
    "MasterKeyRecord",
    "MissingJournalError",
    "ReplayedRecord",
    "Signal",
    "SyncObserver",
    "UnknownMetaRecord",
    "data_start",
    "delete_old_journals",
    "encode_header",
    "encode_record",
    "journal_current_dir",
    "journal_file_name",
    "last_mark_name",
    "list_journal_ids",
    "padding",
    "parse_header",
    "read_journal",
    "read_last_mark",
    "replay",
    "write_last_mark",
]
