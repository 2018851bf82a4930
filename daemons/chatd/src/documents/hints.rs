//! What the model is told about a binary file that is not a document tandem
//! reads: which tool or command reads it instead.

/// The hint for a binary file by its name, one sentence.
pub fn for_binary(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "bmp" | "tif" | "tiff" | "heic" => {
            "it is an image: a model that reads images sees it when it is attached to a message"
        }
        "mp3" | "m4a" | "ogg" | "opus" | "wav" | "flac" | "aac" | "webm" => {
            "it is audio: `ffprobe` in bash says what it holds"
        }
        "mp4" | "mov" | "mkv" | "avi" => "it is a video: `ffprobe` in bash says what it holds",
        "zip" | "jar" => "it is a zip archive: `unzip -l` in bash lists it",
        "gz" | "tgz" | "xz" | "bz2" | "zst" | "tar" => {
            "it is an archive: `tar -tf` in bash lists it"
        }
        "sqlite" | "sqlite3" | "db" => "it is a database: `sqlite3` in bash reads it",
        "doc" | "ppt" | "rtf" | "odt" | "odp" => {
            "it is an office file tandem does not read: convert it with `libreoffice --headless --convert-to docx` in bash, if the box has it"
        }
        "parquet" | "arrow" | "feather" => {
            "it is a columnar table: a Python script with pandas reads it"
        }
        _ => "`file` and `xxd | head` in bash say what it is",
    }
}
