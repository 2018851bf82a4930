//! Why a reply failed, in a word (docs/api.md "When a reply fails"): the
//! real chatd against engine-sim answering as an engine does when the
//! model is missing or out of memory, and a Stop; the run record and its
//! `run.finished` event carry `failure {cause, detail}`, the detail without
//! the engine's address or a path of the box.

use std::time::Duration;

use serde_json::{json, Value};
use tandem_tests::harness::{run_id, Chatd, Sim};

const QUICK: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_failed_reply_says_why_in_a_word_and_names_no_address() -> anyhow::Result<()> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let cases: [(Value, &str); 2] = [
        (
            json!({"status": 404, "message": "The model `qwen3-72b` does not exist."}),
            "model_not_found",
        ),
        (
            json!({"status": 400, "message": "CUDA error: out of memory in /opt/llama.cpp/ggml-cuda.cu at http://10.1.2.3:8000"}),
            "engine_memory",
        ),
    ];
    for (fault, cause) in cases {
        let chat = client.create_chat().await?;
        sim.faults(json!([fault])).await?;
        let mut device = client.events(&chat, 0).await?;
        let run = run_id(&client.send(&chat, "hello").await?)?;
        let record = client
            .wait_run(
                &chat,
                &run,
                &["done", "failed", "stopped", "interrupted"],
                QUICK,
            )
            .await?;
        assert_eq!(record["status"], "failed", "{record}");
        assert_eq!(record["failure"]["cause"], cause, "{record}");
        let detail = record["failure"]["detail"].as_str().unwrap_or("");
        for hidden in ["10.1.2.3", "/opt/llama.cpp", &sim.url()] {
            assert!(!detail.contains(hidden), "{hidden} in {detail}");
        }
        let finished = device
            .read_until(QUICK, |e| e.kind == "run.finished")
            .await?;
        let last = finished
            .last()
            .map(|e| e.data.clone())
            .unwrap_or(Value::Null);
        assert_eq!(last["failure"]["cause"], cause, "{last}");
    }
    // A Stop is a cause too; a reply that ended well has none.
    let chat = client.create_chat().await?;
    let run = run_id(&client.send(&chat, "long [sim tokens=400 tps=20]").await?)?;
    client.wait_run(&chat, &run, &["running"], QUICK).await?;
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert!(stopped.status < 300, "{stopped:?}");
    let record = client
        .wait_run(&chat, &run, &["stopped", "done"], QUICK)
        .await?;
    assert_eq!(record["failure"]["cause"], "stopped", "{record}");
    let chat = client.create_chat().await?;
    let run = run_id(&client.send(&chat, "hi [sim tokens=3 tps=0]").await?)?;
    let record = client.wait_run(&chat, &run, &["done"], QUICK).await?;
    assert!(record.get("failure").is_none(), "{record}");
    Ok(())
}
