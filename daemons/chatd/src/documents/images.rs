//! A photo made fit for a model: longest side at most [`MAX_SIDE`] px
//! (JPEG when it is opaque, PNG when it has transparency), the stored file
//! unchanged. Decoding untrusted bytes runs only in the reader's child
//! process (`helper`), like a document.

use std::io::Cursor;

use base64::Engine as _;
use image::{DynamicImage, GenericImageView, ImageFormat, ImageReader};
use serde::{Deserialize, Serialize};

use super::formats::Refusal;

/// The longest side a model is sent.
pub const MAX_SIDE: u32 = 2_048;
/// The largest image a model is sent as it is, in bytes; past it, it is
/// encoded again even when small enough in pixels.
pub const MAX_SENT_BYTES: u64 = 10 << 20;
/// What decoding may allocate (a 12,000 × 12,000 RGBA image is 550 MiB).
const MAX_DECODE_ALLOC: u64 = 600 << 20;

/// What became of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scaled {
    /// Fit as it is: its own bytes go.
    AsItIs { width: u32, height: u32 },
    /// Made smaller: these bytes go instead.
    Smaller {
        from: (u32, u32),
        width: u32,
        height: u32,
        mime: String,
        data_base64: String,
    },
}

/// Decodes `bytes` and, when it is too large, scales it down.
pub fn scale(bytes: &[u8]) -> Result<Scaled, Refusal> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| Refusal::Damaged(e.to_string()))?;
    if reader.format().is_none() {
        return Err(Refusal::NotWhatItSays("image".into()));
    }
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    reader.limits(limits);
    let decoded = reader
        .decode()
        .map_err(|e| Refusal::Damaged(e.to_string()))?;
    let (width, height) = decoded.dimensions();
    if width.max(height) <= MAX_SIDE && bytes.len() as u64 <= MAX_SENT_BYTES {
        return Ok(Scaled::AsItIs { width, height });
    }
    let smaller = if width.max(height) > MAX_SIDE {
        decoded.resize(MAX_SIDE, MAX_SIDE, image::imageops::FilterType::Triangle)
    } else {
        decoded
    };
    let mut out = Vec::new();
    let mime = if opaque(&smaller) {
        let rgb = DynamicImage::ImageRgb8(smaller.to_rgb8());
        let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85);
        rgb.write_with_encoder(encoder)
            .map_err(|e| Refusal::Damaged(e.to_string()))?;
        "image/jpeg"
    } else {
        smaller
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .map_err(|e| Refusal::Damaged(e.to_string()))?;
        "image/png"
    };
    Ok(Scaled::Smaller {
        from: (width, height),
        width: smaller.width(),
        height: smaller.height(),
        mime: mime.into(),
        data_base64: base64::engine::general_purpose::STANDARD.encode(out),
    })
}

/// No pixel lets anything through.
fn opaque(image: &DynamicImage) -> bool {
    if !image.color().has_alpha() {
        return true;
    }
    image.to_rgba8().pixels().all(|p| p.0[3] == u8::MAX)
}
