//! `engine-sim`: an OpenAI-compatible inference engine simulator for tests,
//! benchmarks and `tandem up` without an engine. See `--help`.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Parser;
use tandem_tests::sim::{self, SimConfig};

/// An OpenAI-compatible engine simulator (llama-server / vLLM stand-in).
///
/// Serves GET /health, GET /v1/models, POST /v1/chat/completions (streaming
/// and not, tool calls included) with deterministic answers
/// `w0 w1 ... w{N-1} `, POST /v1/tokenize (vLLM's shape) and /sim/* control
/// routes. Prints one line `engine-sim listening on http://ADDR`
/// and serves until SIGTERM or SIGINT.
#[derive(Parser, Debug)]
#[command(name = "engine-sim", version, after_long_help = sim::CUE_HELP, after_help = "Cue syntax and control routes: --help")]
struct Args {
    /// Address to listen on (port 0 picks a free port; the printed line names it).
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: String,
    /// Model id served at /v1/models and named in answers.
    #[arg(long, default_value = "sim-small")]
    model: String,
    /// Context window in tokens; longer prompts get llama.cpp's 400.
    #[arg(long, default_value_t = 32768, value_parser = clap::value_parser!(u64).range(1..))]
    context_window: u64,
    /// Answer pace in tokens per second; 0 means as fast as possible.
    #[arg(long, default_value_t = 50.0, value_parser = parse_tps)]
    tokens_per_second: f64,
    /// Default answer length in tokens (a cue `tokens=N` overrides it).
    #[arg(long, default_value_t = 24)]
    tokens: usize,
    /// Prompts over N tokens get a 503 with `Retry-After: 1`: "could not
    /// allocate memory" (a full KV cache), every time. Default: no limit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    memory_limit_tokens: Option<u64>,
    /// No POST /v1/tokenize (nor /tokenize): 404, like llama.cpp without it.
    #[arg(long)]
    no_tokenize: bool,
    /// /v1/models says the model reads images (`capabilities: ["vision"]`).
    #[arg(long)]
    vision: bool,
    /// A /proc/meminfo-shaped file whose MemAvailable `POST
    /// /v1/cache/release` raises by what it frees (`/sim/cache` sets how much
    /// it can).
    #[arg(long)]
    meminfo: Option<std::path::PathBuf>,
    /// Another model id /v1/models lists (text only, the same window);
    /// may be given more than once.
    #[arg(long, value_name = "ID")]
    extra_model: Vec<String>,
    /// A second model /v1/models lists as seeing images; a request to it is
    /// answered with the sizes of the images it was shown.
    #[arg(long, value_name = "ID")]
    vision_model: Option<String>,
    /// A model /v1/models lists as transcribing (`capabilities: ["transcription"]`).
    #[arg(long, value_name = "ID")]
    transcription_model: Option<String>,
    /// No POST /v1/audio/transcriptions: 404, like an engine without it.
    #[arg(long)]
    no_transcriptions: bool,
}

fn parse_tps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err(format!("`{s}` is not a number >= 0")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("engine-sim: cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "engine-sim listening on http://{addr}")?;
        out.flush()?;
    }
    let config = SimConfig {
        model: args.model,
        context_window: args.context_window,
        tokens_per_second: args.tokens_per_second,
        tokens: args.tokens,
        memory_limit_tokens: args.memory_limit_tokens,
        tokenize: !args.no_tokenize,
        vision: args.vision,
        meminfo: args.meminfo,
        extra_models: args.extra_model,
        vision_model: args.vision_model,
        transcriptions: !args.no_transcriptions,
        transcription_model: args.transcription_model,
    };
    sim::serve_with_shutdown(listener, config, async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("engine-sim: cannot watch SIGTERM: {e}");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
    .await
}
